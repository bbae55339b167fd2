package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// RebalanceState is one pool's rebalancing of live connections.
type RebalanceState struct {
	Pool      string
	Active    bool
	Imbalance float64
	Moved     uint64
}

var (
	rebalanceActiveDesc = prometheus.NewDesc("edge_rebalance_active",
		"1 while the pool's connections are being moved off backends above their fair share.", []string{"pool"}, nil)
	rebalanceImbalanceDesc = prometheus.NewDesc("edge_rebalance_imbalance",
		"The largest ratio of a backend's connections over the fleet to its fair share (1: balanced).", []string{"pool"}, nil)
	rebalanceMovedDesc = prometheus.NewDesc("edge_rebalance_moved_total",
		"Connections this edge closed with 1012 to move them off a backend above its fair share.", []string{"pool"}, nil)
)

// rebalanceCollector reports the pools' rebalancing at scrape time;
// nothing until WatchRebalance.
type rebalanceCollector struct {
	state atomic.Pointer[func() []RebalanceState]
}

// WatchRebalance makes the rebalancing gauges report state.
func (m *Registry) WatchRebalance(state func() []RebalanceState) { m.rebalance.state.Store(&state) }

// Describe implements prometheus.Collector.
func (c *rebalanceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rebalanceActiveDesc
	ch <- rebalanceImbalanceDesc
	ch <- rebalanceMovedDesc
}

// Collect implements prometheus.Collector.
func (c *rebalanceCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.state.Load()
	if f == nil {
		return
	}
	for _, s := range (*f)() {
		active := 0.0
		if s.Active {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(rebalanceActiveDesc, prometheus.GaugeValue, active, s.Pool)
		ch <- prometheus.MustNewConstMetric(rebalanceImbalanceDesc, prometheus.GaugeValue, s.Imbalance, s.Pool)
		ch <- prometheus.MustNewConstMetric(rebalanceMovedDesc, prometheus.CounterValue, float64(s.Moved), s.Pool)
	}
}

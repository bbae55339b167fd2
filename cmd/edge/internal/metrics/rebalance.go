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
	Paused    bool
	// Canary is the pool's canary, when it has one: its version, the
	// share set, and the share of the fleet's live connections it holds.
	Canary            string
	CanaryShare, Held float64
}

var (
	rebalanceActiveDesc = prometheus.NewDesc("edge_rebalance_active",
		"1 while the pool's connections are being moved off backends above their fair share.", []string{"pool"}, nil)
	rebalanceImbalanceDesc = prometheus.NewDesc("edge_rebalance_imbalance",
		"The largest ratio of a backend's connections over the fleet to its fair share (1: balanced).", []string{"pool"}, nil)
	rebalanceMovedDesc = prometheus.NewDesc("edge_rebalance_moved_total",
		"Connections this edge closed with 1012 to move them off a backend above its fair share.", []string{"pool"}, nil)
	rebalancePausedDesc = prometheus.NewDesc("edge_rebalance_paused",
		"1 while an operator pauses the moves of the pool's live connections.", []string{"pool"}, nil)
	canaryShareDesc = prometheus.NewDesc("edge_canary_share",
		"The share of the pool's connections the canary's version is set to take (0 to 1).", []string{"pool", "version"}, nil)
	canaryHeldDesc = prometheus.NewDesc("edge_canary_held",
		"The share of the pool's live connections over the fleet that the canary's version holds (0 to 1).", []string{"pool", "version"}, nil)
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
	ch <- rebalancePausedDesc
	ch <- canaryShareDesc
	ch <- canaryHeldDesc
}

// Collect implements prometheus.Collector.
func (c *rebalanceCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.state.Load()
	if f == nil {
		return
	}
	for _, s := range (*f)() {
		ch <- prometheus.MustNewConstMetric(rebalanceActiveDesc, prometheus.GaugeValue, one(s.Active), s.Pool)
		ch <- prometheus.MustNewConstMetric(rebalancePausedDesc, prometheus.GaugeValue, one(s.Paused), s.Pool)
		if s.Canary != "" {
			ch <- prometheus.MustNewConstMetric(canaryShareDesc, prometheus.GaugeValue, s.CanaryShare, s.Pool, s.Canary)
			ch <- prometheus.MustNewConstMetric(canaryHeldDesc, prometheus.GaugeValue, s.Held, s.Pool, s.Canary)
		}
		ch <- prometheus.MustNewConstMetric(rebalanceImbalanceDesc, prometheus.GaugeValue, s.Imbalance, s.Pool)
		ch <- prometheus.MustNewConstMetric(rebalanceMovedDesc, prometheus.CounterValue, float64(s.Moved), s.Pool)
	}
}

// one is 1 for true.
func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

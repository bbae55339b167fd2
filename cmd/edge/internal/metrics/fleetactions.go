package metrics

import (
	"sync/atomic"

	"github.com/edgelb/edge/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	fleetActionsDesc = prometheus.NewDesc("edge_fleet_actions",
		"Operator actions of fleet scope this edge follows under consul.fleet.prefix, by state (drain, disabled, ready: a weight alone).",
		[]string{"state"}, nil)
	fleetActionsHeldDesc = prometheus.NewDesc("edge_fleet_actions_unapplied",
		"Actions of fleet scope naming a pool or backend this edge does not have (applied if one joins).", nil, nil)
	fleetActionsRefusedDesc = prometheus.NewDesc("edge_fleet_actions_refused",
		"Entries under the fleet prefix's admin folder refused in the last answer (too large, another version, out of range, a bad key).", nil, nil)
)

// fleetActionsCollector reports the fleet's actions at scrape time, every
// state at 0 when it has none, so the dashboard and alerts see the series
// from the first scrape; nothing until WatchFleetActions (no fleet prefix).
type fleetActionsCollector struct {
	status atomic.Pointer[func() fleet.ActionsStatus]
}

// WatchFleetActions makes the gauges of the fleet's actions report status,
// read at scrape time.
func (m *Registry) WatchFleetActions(status func() fleet.ActionsStatus) {
	m.fleetActions.status.Store(&status)
}

// Describe implements prometheus.Collector.
func (c *fleetActionsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fleetActionsDesc
	ch <- fleetActionsHeldDesc
	ch <- fleetActionsRefusedDesc
}

// Collect implements prometheus.Collector.
func (c *fleetActionsCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.status.Load()
	if f == nil {
		return
	}
	st := (*f)()
	by := map[string]int{"drain": 0, "disabled": 0, "ready": 0}
	held := 0
	for _, a := range st.Actions {
		by[a.State]++
		if !a.Applied {
			held++
		}
	}
	for s, n := range by {
		ch <- prometheus.MustNewConstMetric(fleetActionsDesc, prometheus.GaugeValue, float64(n), s)
	}
	ch <- prometheus.MustNewConstMetric(fleetActionsHeldDesc, prometheus.GaugeValue, float64(held))
	ch <- prometheus.MustNewConstMetric(fleetActionsRefusedDesc, prometheus.GaugeValue, float64(st.Refused))
}

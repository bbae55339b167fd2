package metrics

import (
	"github.com/edgelb/edge/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// Fleet is what the fleet's gauges read at scrape time.
type Fleet struct {
	// Status is the fleet load's status (fleet.Load.Status).
	Status func() fleet.LoadStatus
	// Shares are this edge's shares of fleet-scope limits.
	Shares func() []FleetShare
}

// FleetShare is this edge's share of one backend's fleet-scope
// max_connections_per_backend.
type FleetShare struct {
	Pool, Backend string
	Share         int64
}

// The fleet's series: present from the first scrape of an edge with
// consul.fleet.prefix, so an alert on staleness needs no first event.
var (
	fleetStaleDesc   = prometheus.NewDesc("edge_fleet_stale", "1 while the fleet's numbers are stale (Consul unreachable, or silent past consul.fleet.stale_after) and fleet-scope limits fall back to the limit divided by the last known fleet size.", nil, nil)
	fleetAgeDesc     = prometheus.NewDesc("edge_fleet_sums_age_seconds", "Time since Consul last answered the fleet's blocking query (since start when never).", nil, nil)
	fleetEdgesDesc   = prometheus.NewDesc("edge_fleet_edges", "Edges in the fleet as last read, this one included.", nil, nil)
	fleetWritesDesc  = prometheus.NewDesc("edge_fleet_writes_total", "Consul writes for this edge's fleet record: session creates and renewals, record writes.", nil, nil)
	fleetWakeupsDesc = prometheus.NewDesc("edge_fleet_wakeups_total", "Answers to the fleet's blocking query.", nil, nil)
	fleetRefusedDesc = prometheus.NewDesc("edge_fleet_keys_refused", "Keys under the fleet's prefix the last read refused, by why: unheld (held by no session, never read), oversized (value over the record bound, refused unread), excess (past the bound on keys looked at).", []string{"why"}, nil)
	fleetShareDesc   = prometheus.NewDesc("edge_fleet_backend_share", "This edge's share of a fleet-scope max_connections_per_backend.", []string{"pool", "backend"}, nil)
)

// WatchFleet registers the fleet's gauges, read from src at scrape time.
func (m *Registry) WatchFleet(src Fleet) { m.reg.MustRegister(fleetCollector{src}) }

// fleetCollector reads the fleet at scrape time.
type fleetCollector struct{ src Fleet }

// Describe implements prometheus.Collector.
func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fleetStaleDesc, fleetAgeDesc, fleetEdgesDesc, fleetWritesDesc, fleetWakeupsDesc, fleetRefusedDesc, fleetShareDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Status()
	stale := 0.0
	if st.Stale {
		stale = 1
	}
	ch <- prometheus.MustNewConstMetric(fleetStaleDesc, prometheus.GaugeValue, stale)
	ch <- prometheus.MustNewConstMetric(fleetAgeDesc, prometheus.GaugeValue, st.Age.Seconds())
	ch <- prometheus.MustNewConstMetric(fleetEdgesDesc, prometheus.GaugeValue, float64(max(st.Edges, 1)))
	ch <- prometheus.MustNewConstMetric(fleetWritesDesc, prometheus.CounterValue, float64(st.Writes))
	ch <- prometheus.MustNewConstMetric(fleetWakeupsDesc, prometheus.CounterValue, float64(st.Wakeups))
	for why, n := range map[string]int{"unheld": st.Unheld, "oversized": st.Oversized, "excess": st.Excess} {
		ch <- prometheus.MustNewConstMetric(fleetRefusedDesc, prometheus.GaugeValue, float64(n), why)
	}
	if c.src.Shares == nil {
		return
	}
	for _, s := range c.src.Shares() {
		ch <- prometheus.MustNewConstMetric(fleetShareDesc, prometheus.GaugeValue, float64(s.Share), s.Pool, s.Backend)
	}
}

package metrics

import (
	"github.com/edgelb/edge/balance"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector reads every pool's snapshot at scrape time, so a backend
// that leaves a pool stops being reported without any bookkeeping, except
// for its live connections: a backend that left and still holds some
// (balance.Pool.Retired) keeps its active-connections series, and its
// draining series, until the last one closes.
type poolCollector struct {
	pools    func() []*balance.Pool
	up       *prometheus.Desc
	active   *prometheus.Desc
	eject    *prometheus.Desc
	weight   *prometheus.Desc
	size     *prometheus.Desc
	draining *prometheus.Desc
	// Passive ejection: every ejection, those the cap refused, and per pool
	// how many are out against how many may be.
	ejections *prometheus.Desc
	refused   *prometheus.Desc
	ejected   *prometheus.Desc
	maxEject  *prometheus.Desc
	admin     *prometheus.Desc
}

func newPoolCollector(pools func() []*balance.Pool) *poolCollector {
	l := []string{"pool", "backend", "address"}
	return &poolCollector{
		pools:  pools,
		up:     prometheus.NewDesc("edge_backend_available", "1 when the backend may receive new connections (healthy, not ejected, under its limit).", l, nil),
		active: prometheus.NewDesc("edge_backend_active_connections", "Connections currently proxied to the backend.", l, nil),
		eject:  prometheus.NewDesc("edge_backend_ejected", "1 while passive ejection keeps the backend out.", l, nil),
		weight: prometheus.NewDesc("edge_backend_weight", "The backend's balancing weight.", l, nil),
		size:   prometheus.NewDesc("edge_pool_backends", "Members of the pool.", []string{"pool"}, nil),
		draining: prometheus.NewDesc("edge_backend_draining",
			"1 while the backend has left its pool and its connections are being sent close 1012; they count in edge_backend_active_connections until they close.", l, nil),

		ejections: prometheus.NewDesc("edge_backend_ejections_total", "Passive ejections of the backend.", l, nil),
		refused:   prometheus.NewDesc("edge_backend_ejections_refused_total", "Ejections due on the backend's failures but refused by the pool's ejection cap or because it was the last available backend.", l, nil),
		ejected:   prometheus.NewDesc("edge_pool_ejected_backends", "Members of the pool passive ejection keeps out now.", []string{"pool"}, nil),
		maxEject:  prometheus.NewDesc("edge_pool_max_ejected_backends", "Members of the pool the ejection cap allows out at once.", []string{"pool"}, nil),
		admin:     prometheus.NewDesc("edge_backend_admin_state", "1 for the state an operator set through the admin API (ready, drain, disabled), 0 for the others.", []string{"pool", "backend", "state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.active
	ch <- c.eject
	ch <- c.weight
	ch <- c.size
	ch <- c.draining
	ch <- c.ejections
	ch <- c.refused
	ch <- c.ejected
	ch <- c.maxEject
	ch <- c.admin
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.pools() {
		s := p.Snapshot()
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(len(s.Backends)), p.Name())
		ch <- prometheus.MustNewConstMetric(c.ejected, prometheus.GaugeValue, float64(p.Ejected()), p.Name())
		ch <- prometheus.MustNewConstMetric(c.maxEject, prometheus.GaugeValue, float64(p.MaxEjected()), p.Name())
		for _, b := range s.Backends {
			lv := []string{p.Name(), b.ID(), b.Addr()}
			ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, b2f(b.Available()), lv...)
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(b.Active()), lv...)
			ch <- prometheus.MustNewConstMetric(c.eject, prometheus.GaugeValue, b2f(b.Ejected()), lv...)
			ch <- prometheus.MustNewConstMetric(c.weight, prometheus.GaugeValue, float64(b.Weight()), lv...)
			ch <- prometheus.MustNewConstMetric(c.draining, prometheus.GaugeValue, 0, lv...)
			ch <- prometheus.MustNewConstMetric(c.ejections, prometheus.CounterValue, float64(b.Ejections()), lv...)
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(b.EjectionsRefused()), lv...)
			for _, st := range balance.AdminStates {
				ch <- prometheus.MustNewConstMetric(c.admin, prometheus.GaugeValue, b2f(b.AdminState() == st), p.Name(), b.ID(), st.String())
			}
		}
		for _, b := range p.Retired() {
			lv := []string{p.Name(), b.ID(), b.Addr()}
			_, draining := b.Draining()
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(b.Active()), lv...)
			ch <- prometheus.MustNewConstMetric(c.draining, prometheus.GaugeValue, b2f(draining), lv...)
		}
	}
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

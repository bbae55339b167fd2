package main

import (
	"crypto/tls"
	"strconv"
	"strings"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/health"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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

// newRegistry returns the edge's private registry with the Go and process
// collectors (RSS per connection is a headline figure operators watch) and
// edge_build_info.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bi := currentBuild()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "edge_build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	info.Set(1)
	reg.MustRegister(info)
	return reg
}

// durationBuckets suit WebSocket lifetimes: from a refused handshake to a
// day-long session.
var durationBuckets = []float64{0.01, 0.1, 1, 10, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600}

// metrics owns the private registry and implements the Observer interfaces
// of the core packages, which never import Prometheus themselves.
type metrics struct {
	reg *prometheus.Registry

	opened     *prometheus.CounterVec
	closed     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	bytes      *prometheus.CounterVec
	dialFail   *prometheus.CounterVec
	rejected   *prometheus.CounterVec
	requests   *prometheus.CounterVec
	reqDur     *prometheus.HistogramVec
	handshakes *prometheus.CounterVec
	certReload *prometheus.CounterVec
	ocsp       *prometheus.CounterVec
	tickets    *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	discovery  *prometheus.CounterVec
	discErrors *prometheus.CounterVec
	probes     *prometheus.CounterVec

	*wsMetrics // metrics_ws.go
}

func newMetrics(pools func() []*balance.Pool) *metrics {
	m := &metrics{reg: newRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.opened = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_connections_opened_total", Help: "WebSocket connections spliced to a backend."}, []string{"pool", "backend"})
	m.closed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_connections_closed_total", Help: "WebSocket connections ended, by reason."}, []string{"pool", "reason"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "edge_connection_duration_seconds", Help: "Lifetime of WebSocket connections.", Buckets: durationBuckets}, []string{"pool"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_bytes_total", Help: "Bytes spliced, by direction (in: client to backend)."}, []string{"pool", "direction"})
	m.dialFail = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_dial_failures_total", Help: "Failed dials or broken backend handshakes that are the backend's own failure (each one is a passive failure)."}, []string{"pool", "backend"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_rejected_total", Help: "Requests answered by the edge itself, by status and reason."}, []string{"pool", "code", "reason"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_http_requests_total", Help: "Plain HTTP requests proxied."}, []string{"pool", "backend", "code"})
	m.reqDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "edge_http_request_duration_seconds", Help: "Plain HTTP request latency.", Buckets: prometheus.DefBuckets}, []string{"pool"})
	m.handshakes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_tls_handshakes_total", Help: "TLS handshakes that reached certificate verification, full or resumed."}, []string{"listener", "kind", "version"})
	m.certReload = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_tls_certificate_reloads_total", Help: "Certificate reloads, by result."}, []string{"listener", "result"})
	m.ocsp = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_tls_ocsp_refreshes_total", Help: "OCSP refresh attempts, by status."}, []string{"listener", "status"})
	m.tickets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_tls_ticket_key_rotations_total", Help: "Session-ticket key rotations."}, []string{"listener"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_config_reloads_total", Help: "Configuration reloads, by result."}, []string{"result"})
	m.discovery = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_discovery_updates_total", Help: "Membership updates published from Consul."}, []string{"pool"})
	m.discErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_discovery_errors_total", Help: "Failed Consul queries (the last good set keeps serving)."}, []string{"pool"})
	m.probes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_health_probes_total", Help: "Active health probes, by result."}, []string{"pool", "backend", "result"})
	for _, c := range []prometheus.Collector{m.opened, m.closed, m.duration, m.bytes, m.dialFail, m.rejected, m.requests, m.reqDur, m.handshakes, m.certReload, m.ocsp, m.tickets, m.reloads, m.discovery, m.discErrors, m.probes} {
		f(c)
	}
	f(newPoolCollector(pools))
	m.wsMetrics = newWSMetrics(m.reg)
	return m
}

// ConnOpened implements proxy.Observer. The proxy's "route" is the name of
// the pool it routed to, hence the label pool.
func (m *metrics) ConnOpened(route, backend string) { m.opened.WithLabelValues(route, backend).Inc() }

// ConnClosed implements proxy.Observer.
func (m *metrics) ConnClosed(route, _ string, reason string, dur time.Duration, in, out int64) {
	m.closed.WithLabelValues(route, reason).Inc()
	m.closedFor(route, reason)
	if reason == string(proxy.ReasonMoved) {
		// Still open in the process it moved to, which observes its
		// whole life and bytes when it ends: counted once, not twice.
		return
	}
	m.duration.WithLabelValues(route).Observe(dur.Seconds())
	m.bytes.WithLabelValues(route, "in").Add(float64(in))
	m.bytes.WithLabelValues(route, "out").Add(float64(out))
}

// DialFailed implements proxy.Observer.
func (m *metrics) DialFailed(route, backend string, _ error) {
	m.dialFail.WithLabelValues(route, backend).Inc()
}

// Rejected implements proxy.Observer.
func (m *metrics) Rejected(route string, status int, reason string) {
	m.rejected.WithLabelValues(route, strconv.Itoa(status), reason).Inc()
}

// HTTPRequest implements proxy.Observer.
func (m *metrics) HTTPRequest(route, backend string, status int, dur time.Duration) {
	m.requests.WithLabelValues(route, backend, strconv.Itoa(status)).Inc()
	m.reqDur.WithLabelValues(route).Observe(dur.Seconds())
}

var _ proxy.Observer = (*metrics)(nil)

// Updated implements discovery.Observer.
func (m *metrics) Updated(pool string, _ int) { m.discovery.WithLabelValues(pool).Inc() }

// Error implements discovery.Observer.
func (m *metrics) Error(pool string, _ error) { m.discErrors.WithLabelValues(pool).Inc() }

// ProbeResult implements health.Observer.
func (m *metrics) ProbeResult(pool, backend string, ok bool, _ time.Duration) {
	r := "pass"
	if !ok {
		r = "fail"
	}
	m.probes.WithLabelValues(pool, backend, r).Inc()
}

// forgetPool drops the per-backend series of a pool that no longer exists.
func (m *metrics) forgetPool(p *balance.Pool) {
	m.discovery.DeleteLabelValues(p.Name())
	m.discErrors.DeleteLabelValues(p.Name())
	m.probes.DeletePartialMatch(prometheus.Labels{"pool": p.Name()})
	m.forgetPoolSeries(p.Name())
}

var (
	_ discovery.Observer = (*metrics)(nil)
	_ health.Observer    = (*metrics)(nil)
)

// tlsMetrics adapts the terminator's events of one listener.
type tlsMetrics struct {
	m        *metrics
	listener string
}

var _ edgetls.Observer = tlsMetrics{}

func (m *metrics) tlsObserver(listener string) tlsMetrics {
	return tlsMetrics{m: m, listener: listener}
}

// CertReloaded implements edgetls.Observer.
func (t tlsMetrics) CertReloaded(_ string, err error) {
	r := "ok"
	if err != nil {
		r = "error"
	}
	t.m.certReload.WithLabelValues(t.listener, r).Inc()
}

// OCSPRefreshed implements edgetls.Observer.
func (t tlsMetrics) OCSPRefreshed(_, status string, _ error) {
	t.m.ocsp.WithLabelValues(t.listener, status).Inc()
}

// TicketKeysRotated implements edgetls.Observer.
func (t tlsMetrics) TicketKeysRotated() { t.m.tickets.WithLabelValues(t.listener).Inc() }

// countHandshakes wraps a listener's tls.Config so every completed
// handshake, full or resumed, is counted: VerifyConnection runs on both.
func (m *metrics) countHandshakes(listener string, cfg *tls.Config) {
	next := cfg.VerifyConnection
	full := map[uint16]prometheus.Counter{}
	resumed := map[uint16]prometheus.Counter{}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		full[v] = m.handshakes.WithLabelValues(listener, "full", tls.VersionName(v))
		resumed[v] = m.handshakes.WithLabelValues(listener, "resumed", tls.VersionName(v))
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if next != nil {
			if err := next(cs); err != nil {
				return err
			}
		}
		if cs.DidResume {
			if c := resumed[cs.Version]; c != nil {
				c.Inc()
			}
		} else if c := full[cs.Version]; c != nil {
			c.Inc()
		}
		return nil
	}
}

// stateSource is what the state collector reads at scrape time.
type stateSource struct {
	ready, draining func() bool
	discovery       func() []discovery.Status
	tls             func() []listenerTLS
	now             func() time.Time
	// recordLayer counts TLS WebSockets whose records edge took over
	// and those crypto/tls kept; nil reports nothing.
	recordLayer func() (owned, kept int64)
}

// listenerTLS is one TLS listener's status and its rotation setting.
type listenerTLS struct {
	name        string
	status      edgetls.Status
	rotateEvery time.Duration
}

// stateCollector exports the gauges the alert rules in
// deploy/prometheus/alerts.yml watch, read from the components' own status
// at scrape time so they can never disagree with /status.
type stateCollector struct {
	src                          stateSource
	ready, draining, discoveryOK *prometheus.Desc
	stapleNext, keyAge, keyInt   *prometheus.Desc
	records                      *prometheus.Desc
}

func newStateCollector(src stateSource) *stateCollector {
	// Certificates are named by their cert_file, as in
	// edge_tls_certificate_not_after_timestamp_seconds (certCollector):
	// unique per pair, where a DNS name is shared by an RSA and an ECDSA pair.
	ln := []string{"listener", "cert_file"}
	return &stateCollector{
		src:         src,
		ready:       prometheus.NewDesc("edge_ready", "1 while /readyz answers 200.", nil, nil),
		draining:    prometheus.NewDesc("edge_draining", "1 from the start of the drain until the process exits.", nil, nil),
		discoveryOK: prometheus.NewDesc("edge_discovery_last_success_timestamp_seconds", "When Consul last answered for the pool (for a restored set, when it was saved); 0 before the first answer.", []string{"pool"}, nil),
		stapleNext:  prometheus.NewDesc("edge_tls_ocsp_staple_next_update_timestamp_seconds", "nextUpdate of the OCSP staple being served; absent without a staple.", ln, nil),
		keyAge:      prometheus.NewDesc("edge_tls_ticket_key_age_seconds", "Time since the session-ticket keys last changed.", []string{"listener"}, nil),
		keyInt:      prometheus.NewDesc("edge_tls_ticket_key_rotation_interval_seconds", "How often the keys are meant to rotate (absent for keys from a file, which edge does not rotate).", []string{"listener"}, nil),
		records:     prometheus.NewDesc("edge_tls_record_layer_total", "TLS WebSockets taken over by the readiness splice, by who protects their records after the upgrade: edge (TLS 1.3) or crypto_tls (TLS 1.2, or a handshake log over its bound).", []string{"owner"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.draining, c.discoveryOK, c.stapleNext, c.keyAge, c.keyInt, c.records} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, b2f(c.src.ready()))
	ch <- prometheus.MustNewConstMetric(c.draining, prometheus.GaugeValue, b2f(c.src.draining()))
	if c.src.recordLayer != nil {
		owned, kept := c.src.recordLayer()
		ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(owned), "edge")
		ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(kept), "crypto_tls")
	}
	for _, st := range c.src.discovery() {
		ch <- prometheus.MustNewConstMetric(c.discoveryOK, prometheus.GaugeValue, unixSeconds(st.LastContact), st.Pool)
	}
	now := c.src.now()
	for _, l := range c.src.tls() {
		c.collectCerts(ch, l)
		t := l.status.Tickets
		if !t.Enabled {
			continue
		}
		if !t.LastChange.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.keyAge, prometheus.GaugeValue, now.Sub(t.LastChange).Seconds(), l.name)
		}
		// Keys generated here or shared through Consul rotate every
		// rotate_every; keys from a file change when the file does.
		if !strings.HasPrefix(t.Source, "file:") && l.rotateEvery > 0 {
			ch <- prometheus.MustNewConstMetric(c.keyInt, prometheus.GaugeValue, l.rotateEvery.Seconds(), l.name)
		}
	}
}

// collectCerts reports the nextUpdate of each certificate's staple.
func (c *stateCollector) collectCerts(ch chan<- prometheus.Metric, l listenerTLS) {
	for _, cs := range l.status.Certificates {
		if o := cs.OCSP; o.Stapled && !o.NextUpdate.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.stapleNext, prometheus.GaugeValue, unixSeconds(o.NextUpdate), l.name, cs.CertFile)
		}
	}
}

// unixSeconds is t as a Prometheus timestamp gauge; 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli()) / 1000
}

// watchState registers the state gauges read from src.
func (m *metrics) watchState(src stateSource) { m.reg.MustRegister(newStateCollector(src)) }

// stateGauges is where the state gauges of e come from.
func (e *edge) stateGauges() stateSource {
	return stateSource{
		ready:       e.admin.Ready,
		draining:    e.admin.Draining,
		recordLayer: e.proxy.RecordLayerTakeovers,
		discovery:   e.dyn.watcherStatus,
		tls: func() []listenerTLS {
			var out []listenerTLS
			for _, l := range e.listeners {
				if l.term != nil {
					out = append(out, listenerTLS{name: l.cfg.Name, status: l.term.Status(), rotateEvery: l.cfg.TLS.SessionTickets.RotateEvery.Std()})
				}
			}
			return out
		},
		now: time.Now,
	}
}

package metrics

import (
	"crypto/tls"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/health"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// BuildInfo is what edge_build_info's labels say.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// Options configures New.
type Options struct {
	// Pools returns every running pool at scrape time; nil reports none.
	Pools func() []*balance.Pool
	Build BuildInfo
}

// newRegistry returns the edge's private registry with the Go and process
// collectors (RSS per connection is a headline figure operators watch) and
// edge_build_info.
func newRegistry(bi BuildInfo) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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

// Registry owns edge's private Prometheus registry and implements the
// Observer interfaces of the core packages, which never import Prometheus
// themselves.
type Registry struct {
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

	// pools are the running pools, whose backends' counters are created
	// at zero (InitBackends).
	pools func() []*balance.Pool
	// fleetActions reports the fleet's actions once WatchFleetActions
	// gave it their status.
	fleetActions *fleetActionsCollector
	// tokens counts token checks (TokenChecked); auth reports the token
	// component at scrape time (WatchAuth).
	tokens *prometheus.CounterVec
	auth   *authCollector
	// rebalance reports the pools' rebalancing (WatchRebalance).
	rebalance *rebalanceCollector
	// upgrade counts process upgrades and their hand-offs (upgrades.go).
	upgrade *upgradeMetrics

	*wsMetrics // ws.go
}

// New returns the registry with every series of edge registered: the Go
// and process collectors, edge_build_info, the per-pool gauges read from
// opts.Pools at scrape time, and the counters the Observer methods feed.
func New(opts Options) *Registry {
	pools := opts.Pools
	if pools == nil {
		pools = func() []*balance.Pool { return nil }
	}
	m := &Registry{reg: newRegistry(opts.Build), pools: pools}
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
	m.fleetActions = &fleetActionsCollector{}
	f(m.fleetActions)
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_auth_verifications_total",
		Help: "Token checks of pools with a token policy, by outcome (ok, why a token did not verify, or why a valid one was refused)."}, []string{"pool", "outcome"})
	f(m.tokens)
	m.auth = &authCollector{now: func() float64 { return float64(time.Now().UnixNano()) / 1e9 }}
	f(m.auth)
	m.rebalance = &rebalanceCollector{}
	f(m.rebalance)
	m.wsMetrics = newWSMetrics(m.reg)
	m.upgrade = newUpgradeMetrics(m.reg)
	return m
}

// ConnOpened implements proxy.Observer. The proxy's "route" is the name of
// the pool it routed to, hence the label pool.
func (m *Registry) ConnOpened(route, backend string) { m.opened.WithLabelValues(route, backend).Inc() }

// ConnClosed implements proxy.Observer.
func (m *Registry) ConnClosed(route, _ string, reason string, dur time.Duration, in, out int64) {
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
func (m *Registry) DialFailed(route, backend string, _ error) {
	m.dialFail.WithLabelValues(route, backend).Inc()
}

// Rejected implements proxy.Observer.
func (m *Registry) Rejected(route string, status int, reason string) {
	m.rejected.WithLabelValues(route, strconv.Itoa(status), reason).Inc()
}

// HTTPRequest implements proxy.Observer.
func (m *Registry) HTTPRequest(route, backend string, status int, dur time.Duration) {
	m.requests.WithLabelValues(route, backend, strconv.Itoa(status)).Inc()
	m.reqDur.WithLabelValues(route).Observe(dur.Seconds())
}

var _ proxy.Observer = (*Registry)(nil)

// Updated implements discovery.Observer: the pool's new members get their
// counters at zero.
func (m *Registry) Updated(pool string, _ int) {
	m.discovery.WithLabelValues(pool).Inc()
	for _, p := range m.pools() {
		if p.Name() == pool {
			m.InitBackends(p)
		}
	}
}

// InitBackends creates the per-backend counters of p's members at zero, so
// a dashboard query or an alert on dial failures or failing probes has a
// series (of zeros) from the first scrape, not from the first failure.
func (m *Registry) InitBackends(p *balance.Pool) {
	for _, b := range p.Snapshot().Backends {
		m.opened.WithLabelValues(p.Name(), b.ID()).Add(0)
		m.dialFail.WithLabelValues(p.Name(), b.ID()).Add(0)
		m.probes.WithLabelValues(p.Name(), b.ID(), "pass").Add(0)
		m.probes.WithLabelValues(p.Name(), b.ID(), "fail").Add(0)
	}
}

// Error implements discovery.Observer.
func (m *Registry) Error(pool string, _ error) { m.discErrors.WithLabelValues(pool).Inc() }

// ProbeResult implements health.Observer.
func (m *Registry) ProbeResult(pool, backend string, ok bool, _ time.Duration) {
	r := "pass"
	if !ok {
		r = "fail"
	}
	m.probes.WithLabelValues(pool, backend, r).Inc()
}

// ForgetPool drops the series of a pool that no longer exists.
func (m *Registry) ForgetPool(pool string) {
	m.discovery.DeleteLabelValues(pool)
	m.discErrors.DeleteLabelValues(pool)
	m.probes.DeletePartialMatch(prometheus.Labels{"pool": pool})
	m.opened.DeletePartialMatch(prometheus.Labels{"pool": pool})
	m.tokens.DeletePartialMatch(prometheus.Labels{"pool": pool})
	m.dialFail.DeletePartialMatch(prometheus.Labels{"pool": pool})
	m.forgetPoolSeries(pool)
}

var (
	_ discovery.Observer = (*Registry)(nil)
	_ health.Observer    = (*Registry)(nil)
)

// tlsMetrics adapts the terminator's events of one listener.
type tlsMetrics struct {
	m        *Registry
	listener string
}

var _ edgetls.Observer = tlsMetrics{}

// TLSObserver is the edgetls.Observer of one listener's terminator.
func (m *Registry) TLSObserver(listener string) edgetls.Observer {
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

// CountHandshakes wraps a listener's tls.Config so every completed
// handshake, full or resumed, is counted: VerifyConnection runs on both.
func (m *Registry) CountHandshakes(listener string, cfg *tls.Config) {
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

// Handler serves the registry in the Prometheus exposition formats.
func (m *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Reloaded counts one configuration reload by result: ok, partial or error.
func (m *Registry) Reloaded(result string) { m.reloads.WithLabelValues(result).Inc() }

// Names returns every metric name the registry describes, series that
// exist only after their first event included: docs/METRICS.md's reference
// and deploy/'s rules and dashboard are checked against it.
func (m *Registry) Names() map[string]bool {
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		m.reg.Describe(ch)
		close(ch)
	}()
	out := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if mm := fq.FindStringSubmatch(d.String()); mm != nil {
			out[mm[1]] = true
		}
	}
	return out
}

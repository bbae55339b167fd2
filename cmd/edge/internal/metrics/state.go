package metrics

import (
	"strings"
	"time"

	"github.com/edgelb/edge/discovery"
	edgetls "github.com/edgelb/edge/tls"
	"github.com/prometheus/client_golang/prometheus"
)

// State is what the state gauges read at scrape time; a nil function
// reports nothing (Ready and Draining: 0).
type State struct {
	Ready, Draining func() bool
	Discovery       func() []discovery.Status
	TLS             func() []ListenerTLS
	Now             func() time.Time // nil: time.Now
	// RecordLayer counts TLS WebSockets whose records edge took over
	// and those crypto/tls kept.
	RecordLayer func() (owned, kept int64)
	// Listeners are the open client sockets of each public listener.
	Listeners func() []ListenerConns
	// ClosePending counts WebSockets asked to close that have not ended.
	ClosePending func() int
}

// ListenerTLS is one TLS listener's status and its rotation setting.
type ListenerTLS struct {
	Name        string
	Status      edgetls.Status
	RotateEvery time.Duration
}

// ListenerConns is one public listener's open client sockets.
type ListenerConns struct {
	Name string
	Open int64
}

// stateCollector exports the gauges the alert rules in
// deploy/prometheus/alerts.yml watch, read from the components' own status
// at scrape time so they can never disagree with /status.
type stateCollector struct {
	src                          State
	ready, draining, discoveryOK *prometheus.Desc
	stapleNext, keyAge, keyInt   *prometheus.Desc
	keyRefused                   *prometheus.Desc
	records                      *prometheus.Desc
	certServed, certNotAfter     *prometheus.Desc
	listenerConns, closePending  *prometheus.Desc
}

func newStateCollector(src State) *stateCollector {
	if src.Now == nil {
		src.Now = time.Now
	}
	// Certificates are named by their cert_file, as in
	// edge_tls_certificate_not_after_timestamp_seconds:
	// unique per pair, where a DNS name is shared by an RSA and an ECDSA pair.
	ln := []string{"listener", "cert_file"}
	return &stateCollector{
		src:         src,
		ready:       prometheus.NewDesc("edge_ready", "1 while /readyz answers 200.", nil, nil),
		draining:    prometheus.NewDesc("edge_draining", "1 from the start of the drain until the process exits.", nil, nil),
		discoveryOK: prometheus.NewDesc("edge_discovery_last_success_timestamp_seconds", "When Consul last answered for the pool (for a restored set, when it was saved); 0 before the first answer.", []string{"pool"}, nil),
		stapleNext:  prometheus.NewDesc("edge_tls_ocsp_staple_next_update_timestamp_seconds", "nextUpdate of the OCSP staple being served; 0 while a certificate that names a responder has none (absent without a responder).", ln, nil),
		keyAge:      prometheus.NewDesc("edge_tls_ticket_key_age_seconds", "Time since the session-ticket keys last changed.", []string{"listener"}, nil),
		keyInt:      prometheus.NewDesc("edge_tls_ticket_key_rotation_interval_seconds", "How often the keys are meant to rotate (absent for keys from a file, which edge does not rotate).", []string{"listener"}, nil),
		keyRefused: prometheus.NewDesc("edge_tls_ticket_keys_refused",
			"1 while the fleet's session-ticket entry in Consul KV, as last read, is refused (does not open with the seal key, is in the clear, of an unknown version, oversized or not keys): the keys in use stay, /status says why. Only for keys shared through Consul.",
			[]string{"listener"}, nil),
		certServed: prometheus.NewDesc("edge_tls_certificate_served",
			"1 when the certificate pair is served in handshakes; 0 when it is left out (expired, not yet valid, or must-staple without a staple): /status says why.",
			ln, nil),
		certNotAfter: prometheus.NewDesc("edge_tls_certificate_not_after_timestamp_seconds",
			"NotAfter of the certificate pair on disk, as a Unix time.", ln, nil),
		listenerConns: prometheus.NewDesc("edge_listener_active_connections",
			"Client sockets open on the listener, from accept until closed (WebSockets, plain keep-alive connections, handshakes in progress).",
			[]string{"listener"}, nil),
		closePending: prometheus.NewDesc("edge_drain_connections_pending",
			"WebSockets asked to close (drain 1001, backend gone 1012) that have not ended yet.", nil, nil),
		records: prometheus.NewDesc("edge_tls_record_layer_total", "TLS WebSockets taken over by the readiness splice, by who protects their records after the upgrade: edge (TLS 1.3) or crypto_tls (TLS 1.2, or a handshake log over its bound).", []string{"owner"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.draining, c.discoveryOK, c.stapleNext, c.keyAge, c.keyInt, c.keyRefused, c.records,
		c.certServed, c.certNotAfter, c.listenerConns, c.closePending} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, b2f(call(c.src.Ready)))
	ch <- prometheus.MustNewConstMetric(c.draining, prometheus.GaugeValue, b2f(call(c.src.Draining)))
	if c.src.RecordLayer != nil {
		owned, kept := c.src.RecordLayer()
		ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(owned), "edge")
		ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(kept), "crypto_tls")
	}
	for _, st := range call(c.src.Discovery) {
		ch <- prometheus.MustNewConstMetric(c.discoveryOK, prometheus.GaugeValue, unixSeconds(st.LastContact), st.Pool)
	}
	now := c.src.Now()
	for _, l := range call(c.src.TLS) {
		c.collectCerts(ch, l)
		c.collectTickets(ch, l, now)
	}
	for _, l := range call(c.src.Listeners) {
		ch <- prometheus.MustNewConstMetric(c.listenerConns, prometheus.GaugeValue, float64(l.Open), l.Name)
	}
	if c.src.ClosePending != nil {
		ch <- prometheus.MustNewConstMetric(c.closePending, prometheus.GaugeValue, float64(c.src.ClosePending()))
	}
}

// call is f's answer, or the zero value for a nil f.
func call[T any](f func() T) T {
	var zero T
	if f == nil {
		return zero
	}
	return f()
}

// collectTickets reports the age of a listener's ticket keys, how often
// they are meant to rotate and whether the fleet's entry is refused.
func (c *stateCollector) collectTickets(ch chan<- prometheus.Metric, l ListenerTLS, now time.Time) {
	t := l.Status.Tickets
	if !t.Enabled {
		return
	}
	if !t.LastChange.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.keyAge, prometheus.GaugeValue, now.Sub(t.LastChange).Seconds(), l.Name)
	}
	// Keys generated here or shared through Consul rotate every
	// rotate_every; keys from a file change when the file does.
	if !strings.HasPrefix(t.Source, "file:") && l.RotateEvery > 0 {
		ch <- prometheus.MustNewConstMetric(c.keyInt, prometheus.GaugeValue, l.RotateEvery.Seconds(), l.Name)
	}
	// From the first scrape for keys shared through Consul, so that an
	// alert sees the series go from 0 to 1 (anyone who can write the
	// entry can make it refused).
	if t.Source == "source" {
		ch <- prometheus.MustNewConstMetric(c.keyRefused, prometheus.GaugeValue, b2f(t.Refused != ""), l.Name)
	}
}

// collectCerts reports each certificate pair: whether it is served, its
// NotAfter, and the nextUpdate of its staple.
func (c *stateCollector) collectCerts(ch chan<- prometheus.Metric, l ListenerTLS) {
	for _, cs := range l.Status.Certificates {
		ch <- prometheus.MustNewConstMetric(c.certServed, prometheus.GaugeValue, b2f(cs.Served), l.Name, cs.CertFile)
		ch <- prometheus.MustNewConstMetric(c.certNotAfter, prometheus.GaugeValue, float64(cs.NotAfter.Unix()), l.Name, cs.CertFile)
		if next, ok := stapleNext(cs.OCSP); ok {
			ch <- prometheus.MustNewConstMetric(c.stapleNext, prometheus.GaugeValue, next, l.Name, cs.CertFile)
		}
	}
}

// stapleNext is the staple gauge of a certificate: its staple's
// nextUpdate, 0 for a certificate that names a responder but has no staple
// (pending, failed, no issuer), so the series exists from the first scrape
// and EdgeOCSPStapleStale fires when it stays without one; none without a
// responder, with stapling off, or for a pair that is not served.
func stapleNext(o edgetls.OCSPStatus) (float64, bool) {
	switch {
	case o.Stapled && !o.NextUpdate.IsZero():
		return unixSeconds(o.NextUpdate), true
	case o.State == "none" || o.State == "disabled" || o.State == "unusable":
		return 0, false
	}
	return 0, true
}

// unixSeconds is t as a Prometheus timestamp gauge; 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli()) / 1000
}

// WatchState registers the gauges read from src at scrape time. Call it
// once.
func (m *Registry) WatchState(src State) { m.reg.MustRegister(newStateCollector(src)) }

package metrics

import (
	"strconv"
	"time"

	"github.com/edgelb/edge/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

// upgradeBuckets suit the time from a request to its 101: a dial and one
// round trip to a backend on the same network, up to a handshake timeout.
var upgradeBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// TLS handshake failure reasons (edge_tls_handshake_failures_total).
var tlsFailureReasons = []string{"protocol_version", "no_shared_cipher", "bad_certificate", "no_certificate", "not_tls", "eof", "timeout", "other"}

// frameRefusedReasons are the close reasons that refuse a frame or a message.
var frameRefusedReasons = []proxy.CloseReason{proxy.ReasonFrameTooBig, proxy.ReasonMessageTooBig, proxy.ReasonBackendFrameTooBig,
	proxy.ReasonMessageTooBigInflated, proxy.ReasonDeflateError, proxy.ReasonRateLimited, proxy.ReasonProtocolError,
	proxy.ReasonBackendProtocolError}

// wsMetrics are the WebSocket-native series: closes by side and code,
// time to 101, closes edge sent, heartbeats, retries, refused frames and
// TLS handshake failures. Every known label set is created at zero for
// each pool and listener (initSeries), so rate() and alerts see a series
// before its first event.
type wsMetrics struct {
	closes      *prometheus.CounterVec
	upgrade     *prometheus.HistogramVec
	closeSent   *prometheus.CounterVec
	pings       *prometheus.CounterVec
	pingTimeout *prometheus.CounterVec
	refused     *prometheus.CounterVec
	retries     *prometheus.CounterVec
	tlsFail     *prometheus.CounterVec
	deflate     *prometheus.CounterVec
	deflateIn   *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
}

func newWSMetrics(reg *prometheus.Registry) *wsMetrics {
	w := &wsMetrics{
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_closes_total",
			Help: "WebSocket connections ended, by the side that closed first (client, backend, edge) and its close code (none: no close frame seen; other: an application or invalid code)."},
			[]string{"pool", "side", "code"}),
		upgrade: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "edge_websocket_upgrade_duration_seconds",
			Help: "Time from the upgrade request to the 101 sent to the client, backend dial and handshake included.", Buckets: upgradeBuckets},
			[]string{"pool"}),
		closeSent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_close_frames_sent_total",
			Help: "Close frames edge sent to clients itself: 1001 drain, 1009 frame or message too big, 1011 ping timeout, 1012 backend gone."},
			[]string{"pool", "code"}),
		pings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_pings_sent_total",
			Help: "Heartbeat pings sent to clients (pool ping_interval)."}, []string{"pool"}),
		pingTimeout: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_ping_timeouts_total",
			Help: "Clients reaped for sending nothing within ping_timeout of a ping."}, []string{"pool"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_frames_refused_total",
			Help: "Connections ended for a frame or message over the pool's limit, by reason."}, []string{"pool", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_backend_retries_total",
			Help: "Further backends tried after a dial or handshake failure, by leg (upgrade, plain)."}, []string{"pool", "leg"}),
		tlsFail: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_tls_handshake_failures_total",
			Help: "TLS handshakes that failed, by reason."}, []string{"listener", "reason"}),
	}
	w.deflate = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_deflate_total",
		Help: "WebSocket connections whose client offered compression, by outcome: stripped (the pool's deflate policy removed it), declined (the backend did not accept it), on (negotiated, limits count compressed bytes), limit (negotiated, messages counted inflated)."},
		[]string{"pool", "outcome"})
	w.deflateIn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_deflate_client_bytes_total",
		Help: "Payload of the clients' compressed messages on connections under the deflate policy limit, by kind: wire (compressed, as received) and inflated (what it inflates to, counted up to max_message_bytes per message)."},
		[]string{"pool", "kind"})
	w.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_websocket_rate_limited_total",
		Help: "Clients over their pool's message or byte rate, by action: close (sent close 1008) or slow (reading paused until the bucket refilled; once per pause)."},
		[]string{"pool", "action"})
	reg.MustRegister(w.closes, w.upgrade, w.closeSent, w.pings, w.pingTimeout, w.refused, w.retries, w.tlsFail, w.deflate, w.deflateIn, w.rateLimited)
	return w
}

// Upgraded implements proxy.Observer.
func (w *wsMetrics) Upgraded(pool string, d time.Duration) {
	w.upgrade.WithLabelValues(pool).Observe(d.Seconds())
}

// ConnCloseCode implements proxy.Observer.
func (w *wsMetrics) ConnCloseCode(pool string, side proxy.CloseSide, code int) {
	w.closes.WithLabelValues(pool, string(side), proxy.CloseCodeLabel(code)).Inc()
}

// CloseSent implements proxy.Observer.
func (w *wsMetrics) CloseSent(pool string, code int) {
	w.closeSent.WithLabelValues(pool, proxy.CloseCodeLabel(code)).Inc()
}

// PingSent implements proxy.Observer.
func (w *wsMetrics) PingSent(pool string) { w.pings.WithLabelValues(pool).Inc() }

// Retried implements proxy.Observer.
func (w *wsMetrics) Retried(pool, leg string) { w.retries.WithLabelValues(pool, leg).Inc() }

// Deflate implements proxy.Observer.
func (w *wsMetrics) Deflate(pool, outcome string) { w.deflate.WithLabelValues(pool, outcome).Inc() }

// RateLimited implements proxy.Observer.
func (w *wsMetrics) RateLimited(pool, action string) {
	w.rateLimited.WithLabelValues(pool, action).Inc()
}

// Inflated implements proxy.Observer.
func (w *wsMetrics) Inflated(pool string, wire, inflated int64) {
	w.deflateIn.WithLabelValues(pool, "wire").Add(float64(wire))
	w.deflateIn.WithLabelValues(pool, "inflated").Add(float64(inflated))
}

// closedFor counts the reasons that have a series of their own.
func (w *wsMetrics) closedFor(pool, reason string) {
	switch proxy.CloseReason(reason) {
	case proxy.ReasonPingTimeout:
		w.pingTimeout.WithLabelValues(pool).Inc()
	case proxy.ReasonFrameTooBig, proxy.ReasonMessageTooBig, proxy.ReasonBackendFrameTooBig,
		proxy.ReasonMessageTooBigInflated, proxy.ReasonDeflateError, proxy.ReasonRateLimited, proxy.ReasonProtocolError,
		proxy.ReasonBackendProtocolError:
		w.refused.WithLabelValues(pool, reason).Inc()
	}
}

// InitSeries creates every known label set at zero for the pools and TLS
// listeners, at start and on every reload, so rate() and the alerts see a
// series before its first event.
func (m *Registry) InitSeries(pools, tlsListeners []string) {
	codes := closeCodes()
	for _, r := range proxy.Rejections() {
		if !r.Routed {
			m.rejected.WithLabelValues("", strconv.Itoa(r.Status), r.Reason).Add(0)
		}
	}
	for _, p := range pools {
		m.initPool(p, codes)
	}
	for _, l := range tlsListeners {
		for _, r := range tlsFailureReasons {
			m.tlsFail.WithLabelValues(l, r).Add(0)
		}
		for _, r := range []string{"ok", "error"} {
			m.certReload.WithLabelValues(l, r).Add(0)
		}
		m.tickets.WithLabelValues(l).Add(0)
	}
	for _, r := range []string{"ok", "partial", "error"} {
		m.reloads.WithLabelValues(r).Add(0)
	}
}

// closeCodes are the code labels of edge_websocket_closes_total by side.
func closeCodes() map[proxy.CloseSide][]string {
	codes := map[proxy.CloseSide][]string{}
	for _, s := range []proxy.CloseSide{proxy.SideClient, proxy.SideBackend} {
		codes[s] = []string{"none", "other"}
		for _, c := range proxy.KnownCloseCodes() {
			codes[s] = append(codes[s], strconv.Itoa(c))
		}
	}
	codes[proxy.SideEdge] = []string{"none"}
	for _, c := range proxy.EdgeCloseCodes() {
		codes[proxy.SideEdge] = append(codes[proxy.SideEdge], strconv.Itoa(c))
	}
	return codes
}

// initPool creates the known series of one pool at zero.
func (m *Registry) initPool(p string, codes map[proxy.CloseSide][]string) {
	w := m.wsMetrics
	for side, cs := range codes {
		for _, c := range cs {
			w.closes.WithLabelValues(p, string(side), c).Add(0)
		}
	}
	w.upgrade.WithLabelValues(p)
	for _, c := range proxy.EdgeCloseCodes() {
		w.closeSent.WithLabelValues(p, strconv.Itoa(c)).Add(0)
	}
	w.pings.WithLabelValues(p).Add(0)
	w.pingTimeout.WithLabelValues(p).Add(0)
	for _, r := range frameRefusedReasons {
		w.refused.WithLabelValues(p, string(r)).Add(0)
	}
	for _, leg := range []string{proxy.LegUpgrade, proxy.LegPlain} {
		w.retries.WithLabelValues(p, leg).Add(0)
	}
	for _, o := range proxy.DeflateOutcomes() {
		w.deflate.WithLabelValues(p, o).Add(0)
	}
	for _, k := range []string{"wire", "inflated"} {
		w.deflateIn.WithLabelValues(p, k).Add(0)
	}
	for _, a := range []string{proxy.RateClose, proxy.RateSlow} {
		w.rateLimited.WithLabelValues(p, a).Add(0)
	}
	for _, r := range proxy.CloseReasons() {
		m.closed.WithLabelValues(p, string(r)).Add(0)
	}
	for _, o := range tokenOutcomes() {
		m.tokens.WithLabelValues(p, o).Add(0)
	}
	for _, r := range proxy.Rejections() {
		m.rejected.WithLabelValues(p, strconv.Itoa(r.Status), r.Reason).Add(0)
	}
	m.duration.WithLabelValues(p)
	m.reqDur.WithLabelValues(p)
	m.bytes.WithLabelValues(p, "in").Add(0)
	m.bytes.WithLabelValues(p, "out").Add(0)
	m.discovery.WithLabelValues(p).Add(0)
	m.discErrors.WithLabelValues(p).Add(0)
}

// forgetPoolSeries drops the series of a pool that no longer exists.
func (w *wsMetrics) forgetPoolSeries(pool string) {
	for _, v := range []*prometheus.CounterVec{w.closes, w.closeSent, w.pings, w.pingTimeout, w.refused, w.retries, w.deflate, w.deflateIn, w.rateLimited} {
		v.DeletePartialMatch(prometheus.Labels{"pool": pool})
	}
	w.upgrade.DeletePartialMatch(prometheus.Labels{"pool": pool})
}

package metrics

import (
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// tlsFailure classifies a crypto/tls server handshake error by its text:
// crypto/tls exports no error types for these, and net/http hands the
// error only to its ErrorLog.
func tlsFailure(msg string) string {
	switch {
	case strings.Contains(msg, "unsupported versions"), strings.Contains(msg, "protocol version"):
		return "protocol_version"
	case strings.Contains(msg, "no cipher suite supported"), strings.Contains(msg, "no ECDHE curve"),
		strings.Contains(msg, "no mutually supported"), strings.Contains(msg, "insufficient security"):
		return "no_shared_cipher"
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "didn't provide a certificate"),
		strings.Contains(msg, "failed to verify"), strings.Contains(msg, "bad certificate"),
		strings.Contains(msg, "unknown certificate"), strings.Contains(msg, "certificate has expired"):
		return "bad_certificate"
	case strings.Contains(msg, "no certificate available"), strings.Contains(msg, "must-staple"),
		strings.Contains(msg, "unrecognized name"):
		return "no_certificate"
	case strings.Contains(msg, "does not look like a TLS handshake"):
		return "not_tls"
	case strings.Contains(msg, "timeout"), strings.Contains(msg, "deadline exceeded"):
		return "timeout"
	case strings.HasSuffix(msg, "EOF"), strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
		return "eof"
	}
	return "other"
}

// httpErrorLog is what net/http writes its errors to: a TLS handshake
// error ("http: TLS handshake error from ADDR: ERR") is counted by reason
// and logged at debug, with a warning at most once a minute per listener
// so a fleet of TLS 1.1 clients is visible at the default level without
// flooding it; every other line goes to the log at debug as before.
type httpErrorLog struct {
	w        *wsMetrics
	listener string
	log      *slog.Logger

	mu         sync.Mutex
	lastWarn   time.Time
	suppressed int
}

// HTTPErrorLog is the http.Server ErrorLog of one listener: TLS handshake
// errors are counted by reason, every line is logged to logger.
func (m *Registry) HTTPErrorLog(listener string, logger *slog.Logger) *log.Logger {
	return log.New(&httpErrorLog{w: m.wsMetrics, listener: listener, log: logger}, "", 0)
}

const tlsHandshakePrefix = "http: TLS handshake error from "

// cutTLSLine returns what follows net/http's TLS handshake error prefix.
func cutTLSLine(line string) (string, bool) {
	return strings.CutPrefix(strings.TrimSuffix(line, "\n"), tlsHandshakePrefix)
}

// Write implements io.Writer for log.Logger: one call per line.
func (h *httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	rest, ok := cutTLSLine(line)
	if !ok {
		h.log.Debug(line)
		return len(p), nil
	}
	client, err := rest, ""
	if host, port, found := strings.Cut(rest, ": "); found {
		client, err = host, port
		if _, _, serr := net.SplitHostPort(client); serr != nil {
			client = ""
		}
	}
	reason := tlsFailure(err)
	h.w.tlsFail.WithLabelValues(h.listener, reason).Inc()
	h.log.Debug("TLS handshake failed", "client", client, "reason", reason, "err", err)
	h.mu.Lock()
	now := time.Now()
	if now.Sub(h.lastWarn) < time.Minute {
		h.suppressed++
		h.mu.Unlock()
		return len(p), nil
	}
	n := h.suppressed
	h.lastWarn, h.suppressed = now, 0
	h.mu.Unlock()
	h.log.Warn("TLS handshake failed", "client", client, "reason", reason, "err", err, "suppressed", n)
	return len(p), nil
}

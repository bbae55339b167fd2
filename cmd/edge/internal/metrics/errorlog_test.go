package metrics

import (
	"log/slog"
	"testing"
)

// TestTLSFailureReasons: crypto/tls's server-side handshake errors, as
// net/http logs them, map to their reasons.
func TestTLSFailureReasons(t *testing.T) {
	for msg, want := range map[string]string{
		"tls: client offered only unsupported versions: [302 301]":                         "protocol_version",
		"tls: no cipher suite supported by both client and server":                         "no_shared_cipher",
		"tls: client didn't provide a certificate":                                         "bad_certificate",
		"tls: failed to verify certificate: x509: certificate signed by unknown authority": "bad_certificate",
		"no certificate available":                                                         "no_certificate",
		"tls: first record does not look like a TLS handshake":                             "not_tls",
		"read tcp 127.0.0.1:443->127.0.0.1:5000: i/o timeout":                              "timeout",
		"EOF": "eof",
		"read tcp 127.0.0.1:443->127.0.0.1:5000: read: connection reset by peer": "eof",
		"tls: something new": "other",
	} {
		if got := tlsFailure(msg); got != want {
			t.Errorf("%q: got %s, want %s", msg, got, want)
		}
	}
}

// FuzzHTTPErrorLog: whatever line net/http writes, the error log never
// fails and counts a TLS handshake error under a known reason only.
func FuzzHTTPErrorLog(f *testing.F) {
	f.Add("http: TLS handshake error from 127.0.0.1:5000: tls: client offered only unsupported versions: [302]\n")
	f.Add("http: TLS handshake error from [::1]:5000: EOF\n")
	f.Add("http: TLS handshake error from \n")
	f.Add("http: superfluous response.WriteHeader call\n")
	m := New(Options{})
	w := &httpErrorLog{w: m.wsMetrics, listener: "l", log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, line string) {
		if n, err := w.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("Write: %d, %v", n, err)
		}
		m.tlsFail.Reset()
		_, _ = w.Write([]byte(line))
		n := tlsSeries(t, m)
		_, isTLS := cutTLSLine(line)
		if (n == 1) != isTLS {
			t.Fatalf("line %q: %d series, TLS line %v", line, n, isTLS)
		}
		for _, r := range tlsFailureReasons {
			m.tlsFail.DeleteLabelValues("l", r)
		}
		if tlsSeries(t, m) != 0 {
			t.Fatalf("line %q counted under an unknown reason", line)
		}
	})
}

// tlsSeries counts the series of edge_tls_handshake_failures_total.
func tlsSeries(t *testing.T, m *Registry) int {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "edge_tls_handshake_failures_total" {
			return len(mf.GetMetric())
		}
	}
	return 0
}

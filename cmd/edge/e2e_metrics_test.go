package main

import (
	"bytes"
	"crypto/tls"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/cmd/edge/internal/metrics"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// metricValue returns the value of the first series m matches, and
// whether there is one.
func metricValue(metrics string, m seriesMatch) (float64, bool) {
	for _, line := range strings.Split(metrics, "\n") {
		if m.match(line) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// seriesMatch picks exposition lines by metric name and labels, in any
// order.
type seriesMatch struct {
	name   string
	labels []*regexp.Regexp
}

func (m seriesMatch) String() string {
	s := m.name + "{"
	for _, l := range m.labels {
		s += l.String() + " "
	}
	return s + "}"
}

func (m seriesMatch) match(line string) bool {
	rest, ok := strings.CutPrefix(line, m.name)
	if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
		return false
	}
	lbl := ""
	if strings.HasPrefix(rest, "{") {
		i := strings.IndexByte(rest, '}')
		if i < 0 {
			return false
		}
		lbl = "," + rest[1:i] + ","
	}
	for _, l := range m.labels {
		if !l.MatchString(lbl) {
			return false
		}
	}
	return true
}

// series matches the lines of name with each of labels (regexps for one
// label="value" pair).
func series(name string, labels ...string) seriesMatch {
	m := seriesMatch{name: name}
	for _, l := range labels {
		m.labels = append(m.labels, regexp.MustCompile(`,`+l+`,`))
	}
	return m
}

// poolLabel matches the pool's label under either name: the series of
// cmd/edge/internal/metrics call it route today.
const poolLabel = `(?:pool|route)="app"`

// TestMetricsZeroEventsTLSFailure: before any traffic the known label
// sets exist at zero (limits, close codes by side, retries, TLS failure
// reasons); a TLS 1.1 handshake leaves a metric and a log line; a client
// frame over the limit shows as a close 1009 by edge, one close frame
// sent, one refused frame, and one upgrade in the time-to-101 histogram.
func TestMetricsZeroEventsTLSFailure(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "    websocket: {max_frame_bytes: 1024}\n")
	p := startEdge(t, s.cfg)

	m := adminGet(t, s.admin, "/metrics")
	for _, re := range []seriesMatch{
		series("edge_rejected_total", `code="429"`, poolLabel, `reason="rate_limit"`),
		series("edge_rejected_total", `code="503"`, poolLabel, `reason="pool_max_conns"`),
		series("edge_rejected_total", `code="503"`, poolLabel, `reason="client_max_conns"`),
		series("edge_rejected_total", `code="503"`, poolLabel, `reason="max_conns"`),
		series("edge_rejected_total", `code="503"`, poolLabel, `reason="pool_rate_limit"`),
		series("edge_connections_closed_total", `reason="ping_timeout"`, poolLabel),
		series("edge_websocket_closes_total", `code="1000"`, `pool="app"`, `side="client"`),
		series("edge_websocket_closes_total", `code="1009"`, `pool="app"`, `side="edge"`),
		series("edge_websocket_closes_total", `code="none"`, `pool="app"`, `side="backend"`),
		series("edge_websocket_close_frames_sent_total", `code="1001"`, `pool="app"`),
		series("edge_websocket_pings_sent_total", `pool="app"`),
		series("edge_websocket_ping_timeouts_total", `pool="app"`),
		series("edge_websocket_frames_refused_total", `pool="app"`, `reason="frame_too_big"`),
		series("edge_backend_retries_total", `leg="upgrade"`, `pool="app"`),
		series("edge_backend_retries_total", `leg="plain"`, `pool="app"`),
		series("edge_tls_handshake_failures_total", `listener="wss"`, `reason="protocol_version"`),
		series("edge_websocket_upgrade_duration_seconds_count", `pool="app"`),
		series("edge_listener_active_connections", `listener="ws"`),
		series("edge_drain_connections_pending"),
	} {
		if v, ok := metricValue(m, re); !ok || v != 0 {
			t.Errorf("before any event: %s: got %v (exported %v), want 0", re, v, ok)
		}
	}

	if _, err := tls.Dial("tcp", s.wss, &tls.Config{RootCAs: s.roots, MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10}); err == nil {
		t.Fatal("a TLS 1.1 client was accepted")
	}
	p.waitLog(t, `"reason":"protocol_version"`)
	if !strings.Contains(grepLines(p.logs(), "protocol_version"), `"msg":"TLS handshake failed"`) {
		t.Errorf("no TLS handshake failure line:\n%s", grepLines(p.logs(), "protocol_version"))
	}
	testkit.Await(t, 20*time.Second, "the TLS 1.1 failure counted", func() (bool, string) {
		m := adminGet(t, s.admin, "/metrics")
		v, _ := metricValue(m, series("edge_tls_handshake_failures_total", `listener="wss"`, `reason="protocol_version"`))
		return v == 1, grepLines(m, "edge_tls_handshake_failures_total")
	})

	c, _, err := s.dialer().Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testkit.Ask(t, c, "x")
	// The refused TLS 1.1 socket may still be on its way out.
	testkit.Await(t, 20*time.Second, "one wss socket with one WebSocket open", func() (bool, string) {
		m := adminGet(t, s.admin, "/metrics")
		v, _ := metricValue(m, series("edge_listener_active_connections", `listener="wss"`))
		return v == 1, grepLines(m, "edge_listener_active_connections")
	})
	if err := c.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte{'b'}, 2048)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
		t.Fatalf("got %v, want close 1009", err)
	}
	want := []struct {
		m seriesMatch
		v float64
	}{
		{series("edge_websocket_closes_total", `code="1009"`, `pool="app"`, `side="edge"`), 1},
		{series("edge_websocket_close_frames_sent_total", `code="1009"`, `pool="app"`), 1},
		{series("edge_websocket_frames_refused_total", `pool="app"`, `reason="frame_too_big"`), 1},
		{series("edge_websocket_upgrade_duration_seconds_count", `pool="app"`), 1},
		{series("edge_connections_closed_total", `reason="frame_too_big"`, poolLabel), 1},
		{series("edge_websocket_frames_refused_total", `pool="app"`, `reason="message_too_big"`), 0},
		{series("edge_websocket_closes_total", `code="1009"`, `pool="app"`, `side="client"`), 0},
		{series("edge_websocket_upgrade_duration_seconds_bucket", `le="\+Inf"`, `pool="app"`), 1},
		{series("edge_websocket_close_frames_sent_total", `code="1001"`, `pool="app"`), 0},
		{series("edge_tls_handshake_failures_total", `listener="wss"`, `reason="no_shared_cipher"`), 0},
	}
	testkit.Await(t, 20*time.Second, "the 1009 close counted", func() (bool, string) {
		m := adminGet(t, s.admin, "/metrics")
		var bad []string
		for _, w := range want {
			if v, ok := metricValue(m, w.m); !ok || v != w.v {
				bad = append(bad, w.m.String()+" = "+strconv.FormatFloat(v, 'g', -1, 64)+" want "+strconv.FormatFloat(w.v, 'g', -1, 64))
			}
		}
		return len(bad) == 0, strings.Join(bad, "\n")
	})
}

// promtool is Prometheus's own checker; EDGE_REQUIRE_INTEROP=1 makes its
// absence a failure (CI), otherwise the test is skipped.
func promtool(t *testing.T) string {
	t.Helper()
	const bin = "/usr/bin/promtool"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("EDGE_REQUIRE_INTEROP") == "1" {
			t.Fatalf("promtool: %v (EDGE_REQUIRE_INTEROP=1)", err)
		}
		t.Skipf("promtool: %v", err)
	}
	return bin
}

// TestMetricsPromtoolCleanAndInReadme: what the binary's /metrics serves,
// after traffic on every path, passes `promtool check metrics` (names,
// units, _total, help), and docs/METRICS.md's metrics reference lists exactly the
// edge_* metrics edge exports.
func TestMetricsPromtoolCleanAndInReadme(t *testing.T) {
	bin := promtool(t)
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "    websocket: {max_frame_bytes: 1024, ping_interval: 1s}\n")
	startEdge(t, s.cfg)
	c, _, err := s.dialer().Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Ask(t, c, "x")
	c.Close()
	_ = adminGet(t, s.admin, "/metrics")
	m := adminGet(t, s.admin, "/metrics")

	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(m)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	exported := map[string]bool{}
	for _, mm := range regexp.MustCompile(`(?m)^# TYPE (edge_\w+) `).FindAllStringSubmatch(m, -1) {
		exported[mm[1]] = true
	}
	// Series that exist only once their event happened (per backend
	// dial failures, per backend probes) are known from Describe.
	described := describedNames(t)
	documented := readmeMetrics(t)
	for name := range exported {
		if !documented[name] {
			t.Errorf("%s is exported but not in docs/METRICS.md's metrics reference", name)
		}
	}
	for name := range documented {
		if !exported[name] && !described[name] {
			t.Errorf("docs/METRICS.md's metrics reference lists %s, which edge does not export", name)
		}
	}
}

// describedNames returns every edge_* metric name edge's registry
// describes.
func describedNames(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New(metrics.Options{})
	m.WatchState(metrics.State{})
	m.WatchFleet(metrics.Fleet{}) // with consul.fleet.prefix
	out := map[string]bool{}
	for name := range m.Names() {
		if strings.HasPrefix(name, "edge_") {
			out[name] = true
		}
	}
	return out
}

// readmeMetrics returns the names in the first column of docs/METRICS.md's
// "## Metrics reference" table.
func readmeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Metrics reference\n")
	if !ok {
		t.Fatal("docs/METRICS.md has no \"## Metrics reference\" section")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	out := map[string]bool{}
	for _, mm := range regexp.MustCompile("(?m)^\\| `(edge_\\w+)` \\|").FindAllStringSubmatch(sec, -1) {
		out[mm[1]] = true
	}
	if len(out) == 0 {
		t.Fatal("docs/METRICS.md's metrics reference has no rows")
	}
	return out
}

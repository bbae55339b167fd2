package main

import (
	"net/netip"
	"testing"
	"time"

	"github.com/edgelb/edge/bench/internal/reporttest"
	"github.com/edgelb/edge/bench/internal/tlscert"
	"github.com/edgelb/edge/conf"
)

func TestQuantile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		name string
		vs   []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.99, 0},
		{"one", []time.Duration{7}, 0.5, 7},
		{"p50 of 100 is the 50th", hundred, 0.50, 50 * time.Millisecond},
		// 0.99*100 is 99.00000000000001 in floating point: a plain
		// ceil would take the 100th.
		{"p99 of 100 is the 99th", hundred, 0.99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 1, 100 * time.Millisecond},
		{"p99 of 50 is the max", hundred[:50], 0.99, 50 * time.Millisecond},
		{"p0 is the min", hundred, 0, time.Millisecond},
		{"p50 of 3 is the middle", []time.Duration{1, 2, 3}, 0.5, 2},
	} {
		if got := quantile(c.vs, c.q); got != c.want {
			t.Errorf("%s: quantile(%v) = %v, want %v", c.name, c.q, got, c.want)
		}
	}
}

func TestSummarizeWindow(t *testing.T) {
	var ss []sample
	for i := range 10 {
		ss = append(ss, sample{Sent: time.Duration(i) * time.Second, RTT: time.Duration(i+1) * time.Millisecond})
	}
	// [2s, 5s): the samples sent at 2, 3 and 4 s, not the one at 5 s.
	got := summarize(ss, window{From: 2 * time.Second, To: 5 * time.Second})
	want := latency{N: 3, P50: 4, P99: 5, Max: 5}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
	if got := summarize(ss, window{From: 20 * time.Second, To: 30 * time.Second}); got != (latency{}) {
		t.Errorf("empty window = %+v, want zero", got)
	}
}

// TestConfig renders the edge configuration and loads it with edge's own
// loader: a plain and a TLS 1.3 listener, the drain and upgrade bounds of
// the flags, access log and every limit off (the prober's connection rate
// from one address must never be refused), info logs (for the "drained"
// line).
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := tlscert.Write(dir, netip.MustParseAddr("127.0.14.1")); err != nil {
		t.Fatal(err)
	}
	a := addrsOn("127.0.14.1", 2)
	path, err := renderConfig(configData{
		Dir: dir, Admin: a.Admin, Plain: a.Plain, TLS: a.TLS, Backends: a.Backends,
		DrainWindow: 5 * time.Second, DrainTimeout: time.Minute, UpgradeTimeout: 45 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Listeners) != 2 || c.Listeners[0].TLS != nil || c.Listeners[0].Address != "127.0.14.1:18080" {
		t.Errorf("listeners[0] = %+v, want plain on 127.0.14.1:18080", c.Listeners[0])
	}
	if l := c.Listeners[1]; l.TLS == nil || l.TLS.MinVersion != "1.3" || l.Address != "127.0.14.1:18443" {
		t.Errorf("listeners[1] = %+v, want TLS 1.3 on 127.0.14.1:18443", l)
	}
	if c.Admin.Address != "127.0.14.1:19990" {
		t.Errorf("admin = %q", c.Admin.Address)
	}
	if time.Duration(c.Drain.Window) != 5*time.Second || time.Duration(c.Drain.Timeout) != time.Minute || time.Duration(c.Upgrade.Timeout) != 45*time.Second {
		t.Errorf("drain %+v, upgrade %+v; want window 5s, timeout 1m, upgrade 45s", c.Drain, c.Upgrade)
	}
	if c.Log.AccessLog || c.Log.Level != "info" || c.Log.Format != "json" {
		t.Errorf("log = %+v, want info, json, no access log", c.Log)
	}
	if c.Limits.MaxConnections != 0 {
		t.Errorf("limits.max_connections = %d, want 0", c.Limits.MaxConnections)
	}
	p := c.Pools[0]
	if len(p.Backends) != 2 || p.Backends[0].Address != "127.0.14.1:19101" || p.Backends[1].Address != "127.0.14.1:19102" {
		t.Errorf("backends = %+v", p.Backends)
	}
	if p.Limits != offLimits {
		t.Errorf("pool limits = %+v, want all 0", p.Limits)
	}
}

// TestParseLog reads the figures from lines as edge writes them: the old
// process's "drained" with moved and closed, not the new process's own
// drain at the end of the run (left only).
func TestParseLog(t *testing.T) {
	log := `{"time":"2026-12-01T12:14:46.419317292Z","level":"INFO","msg":"edge started","version":"v1","pid":28406,"parent":false}
{"time":"2026-12-01T12:14:56.616722574Z","level":"INFO","msg":"upgrade: the new process serves; handing over","via":"api","took":"9.797581ms"}
{"time":"2026-12-01T12:14:56.616933126Z","level":"INFO","msg":"handed over: draining","connections":100,"window":"5s","timeout":"1m0s"}
not json
{"time":"2026-12-01T12:14:56.634445327Z","level":"INFO","msg":"drained","moved":98,"closed":2,"left":0}
{"time":"2026-12-01T12:14:56.634510638Z","level":"INFO","msg":"adopted connections from the old process","connections":98}
{"time":"2026-12-01T12:14:57.0Z","level":"WARN","msg":"something odd"}
{"time":"2026-12-01T12:15:01.640900424Z","level":"INFO","msg":"drained","left":0}
`
	var r result
	r.parseLog([]byte(log))
	if !r.Drained || r.Moved != 98 || r.Closed != 2 || r.Adopted != 98 {
		t.Errorf("drained %v moved %d closed %d adopted %d, want true 98 2 98", r.Drained, r.Moved, r.Closed, r.Adopted)
	}
	if r.NewServed != 0.009797581 {
		t.Errorf("new served = %v, want 0.009797581", r.NewServed)
	}
	if len(r.Warnings) != 1 {
		t.Errorf("warnings = %q, want the WARN line", r.Warnings)
	}
}

func TestParseUpgrade(t *testing.T) {
	pid, ver := parseUpgrade("edge: upgraded to /tmp/x/edge: pid 28490 now serves (version d89ca8c); pid 28406 drains\n")
	if pid != 28490 || ver != "d89ca8c" {
		t.Errorf("parseUpgrade = %d, %q", pid, ver)
	}
	if pid, _ := parseUpgrade("edge -upgrade: 409 Conflict: busy"); pid != 0 {
		t.Errorf("pid of a refusal = %d", pid)
	}
}

func TestRender(t *testing.T) {
	run := func(n int, returned float64, p99 float64, failed bool) *result {
		r := &result{Conns: n, UpgradeReturned: returned, Moved: n, Before: latency{P99: 1}, During: latency{P99: p99}, ExtraP99: p99 - 1}
		r.Memory.SumPeak = 64 << 20
		if failed {
			r.Err = "edge -upgrade: exit status 1"
		}
		if p99 == 5 {
			r.Failures = []failure{{At: 12500 * time.Millisecond, Conn: "wss-7", Err: "read: websocket: close 1012 (service restart)", Close: true}}
			r.ProbeFailures = []string{"12.040s: probe 601: read: EOF"}
		}
		return r
	}
	a := &report{Runs: []*result{run(1000, 0.1, 3, false), run(1000, 0.3, 5, false), run(1000, 0.2, 4, false), run(9000, 0.5, 9, false), run(9000, 9, 9, true)},
		Errors: []string{"repeat 2: edge -upgrade: exit status 1"}, Date: "2026-12-01T13:00:00Z", Command: "upgradebench -conns 1000"}
	a.Machine.NProc, a.Machine.Model = 2, "AMD EPYC"
	a.Runs[0].Version = "v1"
	reporttest.Contains(t, render([]*report{a}),
		"- 2026-12-01T13:00:00Z: `upgradebench -conns 1000`; 2 × AMD EPYC, 0 GiB, Linux , fd limit ; edge v1\n",
		"| | 1000 connections (500 ws + 500 wss), 3 runs | 9000 connections (4500 ws + 4500 wss), 1 runs |",
		"| `edge -upgrade` returned (new process serves), s | 0.20 (0.10–0.30) | 0.50 |",
		"| moved by the old process | 1000 | 9000 |",
		"| **extra p99 during the upgrade, ms** | 3.00 (2.00–4.00) | 8.00 |",
		"| **RSS old + new peak, MiB** | 64.0 | 64.0 |",
		"Failed: repeat 2: edge -upgrade: exit status 1",
		"| live connections with an error or a close | 0 (0–1) | 0 |",
		"- wss-7 at 12.500 s: read: websocket: close 1012 (service restart)",
		"1000 connections, repeat 0: 1 probes failed:\n- 12.040s: probe 601: read: EOF",
	)
}

func TestSumMetric(t *testing.T) {
	text := `# HELP edge_backend_active_connections Connections currently proxied to the backend.
# TYPE edge_backend_active_connections gauge
edge_backend_active_connections{backend="b1",pool="echo"} 4500
edge_backend_active_connections{backend="b2",pool="echo"} 4499
edge_backend_active_connections_other 7
`
	if got := sumMetric(text, "edge_backend_active_connections"); got != 8999 {
		t.Errorf("sumMetric = %d, want 8999", got)
	}
}

// offLimits is a pool's limits with none set: every number 0 (off) and
// both scopes at their default, local.
var offLimits = conf.PoolLimits{MaxConnectionsPerBackendScope: conf.ScopeLocal, ConnectionRateScope: conf.ScopeLocal}

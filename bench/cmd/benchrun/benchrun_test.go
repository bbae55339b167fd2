package main

import (
	"encoding/json"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/bench/internal/procfs"
	"github.com/edgelb/edge/bench/internal/reporttest"
	"github.com/edgelb/edge/conf"
)

func TestSaturated(t *testing.T) {
	tests := []struct {
		proxy, load float64
		want        string
	}{
		{0.99, 0.50, "proxy core"},
		{0.40, 0.97, "load core"},
		{0.96, 0.96, "both"},
		{0.50, 0.50, "none"},
	}
	for _, tt := range tests {
		if got := saturated(tt.proxy, tt.load); got != tt.want {
			t.Errorf("saturated(%v, %v) = %q, want %q", tt.proxy, tt.load, got, tt.want)
		}
	}
}

func TestForeignPct(t *testing.T) {
	c0 := coreSample{0: {Busy: 100, Total: 200}, 1: {Busy: 100, Total: 200}}
	// Over one second both cores were busy for 150 ticks (1.5 s of CPU);
	// the benchmark's own processes took 1 s of it.
	c1 := coreSample{0: {Busy: 200, Total: 300}, 1: {Busy: 150, Total: 300}}
	got := foreignPct(c0, c1, time.Second, time.Second)
	if want := 50.0; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("foreignPct = %v, want %v", got, want)
	}
	if got := foreignPct(c0, c1, 5*time.Second, time.Second); got != 0 {
		t.Errorf("foreignPct with more of ours than busy = %v, want 0", got)
	}
}

func TestRender(t *testing.T) {
	run := func(proxy, phase string, rep int, m map[string]float64) Run {
		return Run{Proxy: proxy, Phase: phase, Repeat: rep, Metrics: m, Saturated: "proxy core"}
	}
	res := Result{
		Finished: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		Command:  "bench/run.sh",
		Machine:  procfs.Machine{NProc: 2, Model: "Test CPU", Kernel: "6.1", MemoryKB: 24 << 20, FDLimit: "20000/20000"},
		Versions: map[string]string{"haproxy": "HAProxy 2.6"},
		Runs: []Run{
			run("edge", "echo", 1, map[string]float64{"cpu_us_per_msg": 10, "proxy_core_busy_pct": 99}),
			run("edge", "echo", 2, map[string]float64{"cpu_us_per_msg": 12, "proxy_core_busy_pct": 99}),
			run("haproxy", "echo", 1, map[string]float64{"cpu_us_per_msg": 20, "proxy_core_busy_pct": 98}),
			run("nginx", "echo", 1, map[string]float64{"cpu_us_per_msg": 11, "proxy_core_busy_pct": 97}),
			{Proxy: "nginx", Phase: "idle", Repeat: 1, Error: "boom"},
		},
	}
	md := render([]Result{res})
	reporttest.Contains(t, md,
		"| metric | edge | HAProxy | nginx | edge / HAProxy | edge / nginx |",
		"| 11.00 (10.00–12.00) | 20.00 | 11.00 | 0.55× | 1.00× |",
		"2 × Test CPU",
		"`bench/run.sh`",
		"2026-01-02 03:04",
		"nginx idle repeat 1",
	)
}

func TestSelectProxies(t *testing.T) {
	tests := []struct {
		name      string
		names     []string
		haveEdge  bool
		want      []string
		wantSkips []string
	}{
		{"default", allProxies, true, []string{"edge", "edge-frames", "haproxy", "nginx"}, nil},
		{"anchors only", []string{"haproxy", "nginx"}, true, []string{"haproxy", "nginx"}, nil},
		{"edge modes back to back", []string{"edge-frames", "nginx", "edge"}, true, []string{"edge", "edge-frames", "nginx"}, nil},
		{"duplicates", []string{"edge", "edge"}, true, []string{"edge"}, nil},
		{"no edge binary", allProxies, false, []string{"haproxy", "nginx"}, []string{"edge", "edge-frames"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skipped, err := selectProxies(tt.names, tt.haveEdge)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) || !slices.Equal(skipped, tt.wantSkips) {
				t.Errorf("selectProxies(%v, %v) = %v, skipped %v; want %v, skipped %v", tt.names, tt.haveEdge, got, skipped, tt.want, tt.wantSkips)
			}
		})
	}
	if _, _, err := selectProxies([]string{"edge", "envoy"}, true); err == nil {
		t.Error("selectProxies accepted an unknown proxy")
	}
}

func TestPlan(t *testing.T) {
	got := plan(allProxies, []string{"idle", "echo", "connect-full"}, 1, "gorilla")
	want := []step{
		{"idle", "edge"}, {"idle", "haproxy"}, {"idle", "nginx"},
		{"echo", "edge"}, {"echo", "edge-frames"}, {"echo", "haproxy"}, {"echo", "nginx"},
		{"connect-full", "edge"}, {"connect-full", "haproxy"}, {"connect-full", "nginx"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan = %v, want %v", got, want)
	}
	// Every repeat rotates the order by one; the edge modes stay together.
	rotated := map[int][]step{
		2: {{"echo", "haproxy"}, {"echo", "nginx"}, {"echo", "edge"}, {"echo", "edge-frames"}},
		3: {{"echo", "nginx"}, {"echo", "edge"}, {"echo", "edge-frames"}, {"echo", "haproxy"}},
		4: {{"echo", "edge"}, {"echo", "edge-frames"}, {"echo", "haproxy"}, {"echo", "nginx"}},
	}
	for rep, want := range rotated {
		if got := plan(allProxies, []string{"echo"}, rep, "gorilla"); !slices.Equal(got, want) {
			t.Errorf("plan of repeat %d = %v, want %v", rep, got, want)
		}
	}
	if got := plan([]string{"edge-frames"}, []string{"idle", "rate"}, 1, "gorilla"); len(got) != 0 {
		t.Errorf("edge-frames runs %v, want only the echo phase", got)
	}
}

// echoRuns returns the echo phases of edge and edge-frames in repeats
// 1..len(opaque), with the given CPU per message.
func echoRuns(opaque, framed []float64) []Run {
	var runs []Run
	for i := range opaque {
		runs = append(runs,
			Run{Proxy: "edge", Phase: "echo", Repeat: i + 1, Saturated: "load core",
				Metrics: map[string]float64{"cpu_us_per_msg": opaque[i], "msgs_per_s": 20000, "proxy_core_busy_pct": 85, "load_core_busy_pct": 99}},
			Run{Proxy: edgeFrames, Phase: "echo", Repeat: i + 1, Saturated: "load core",
				Metrics: map[string]float64{"cpu_us_per_msg": framed[i], "msgs_per_s": 19000, "proxy_core_busy_pct": 88, "load_core_busy_pct": 99}})
	}
	return runs
}

func TestFrameOverhead(t *testing.T) {
	fo := frameOverhead([]Result{{Runs: echoRuns([]float64{40, 36, 38}, []float64{42, 40, 38})}})
	if fo == nil {
		t.Fatal("frameOverhead = nil")
	}
	if fo.Opaque.Median != 38 || fo.FrameAware.Median != 40 {
		t.Errorf("medians %v and %v, want 38 and 40", fo.Opaque.Median, fo.FrameAware.Median)
	}
	if want := 40.0 / 38; math.Abs(fo.Ratio-want) > 1e-12 || !fo.Met || fo.Limit != 1.10 {
		t.Errorf("ratio %v met %v limit %v, want %v met within 1.10", fo.Ratio, fo.Met, fo.Limit, want)
	}
	// Ratios within each repeat: 42/40, 40/36, 38/38.
	if fo.PerRepeat.N != 3 || fo.PerRepeat.Min != 1 || math.Abs(fo.PerRepeat.Max-40.0/36) > 1e-12 {
		t.Errorf("per-repeat ratios %+v, want 3 from 1 to %v", fo.PerRepeat, 40.0/36)
	}
	if fo := frameOverhead([]Result{{Runs: echoRuns([]float64{10}, []float64{11.5})}}); fo == nil || fo.Met {
		t.Errorf("1.15× counted as met: %+v", fo)
	}
	onlyEdge := echoRuns([]float64{10}, []float64{11})[:1]
	if fo := frameOverhead([]Result{{Runs: onlyEdge}}); fo != nil {
		t.Errorf("frameOverhead without edge-frames = %+v, want nil", fo)
	}
	// The results file carries the figure.
	b, err := json.Marshal(Result{Runs: echoRuns([]float64{10}, []float64{10.5}), FrameOverhead: frameOverhead([]Result{{Runs: echoRuns([]float64{10}, []float64{10.5})}})})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"frame_overhead":{`, `"ratio":1.05`, `"limit":1.1`, `"met":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
}

func TestRenderFrameOverhead(t *testing.T) {
	res := Result{Runs: echoRuns([]float64{40, 36, 38}, []float64{42, 40, 38})}
	md := render([]Result{res})
	reporttest.Contains(t, md,
		"## Frame-aware overhead",
		"`websocket: { max_frame_bytes: 1048576, ping_interval: 30s, ping_timeout: 10s }`",
		"| closed-loop echo | edge opaque | edge frame-aware | frame-aware / opaque |",
		"| **proxy CPU per message (µs)** | 38.00 (36.00–40.00) | 40.00 (38.00–42.00) | 1.053× (1.000–1.111) |",
		"| messages/s | 20000 (20000–20000) | 19000 (19000–19000) | 0.95× |",
		"| cores (see which core saturated) | proxy 85%, load 99%, other 0%: load core | proxy 88%, load 99%, other 0%: load core | |",
		"## Targets",
		"| frame-aware echo CPU-µs/msg, frame-aware / opaque edge: ≤ 1.10× | 1.053× (1.000–1.111) | **met** |",
	)
	// edge-frames stays out of the three-way table.
	if strings.Contains(md, "| metric | edge | edge frame-aware") {
		t.Errorf("edge-frames in the main table:\n%s", md)
	}

	res = Result{Runs: echoRuns([]float64{10}, []float64{11.2})}
	if md := render([]Result{res}); !strings.Contains(md, "| 1.120× | **not met** |") {
		t.Errorf("report lacks the missed target:\n%s", md)
	}
	res = Result{Runs: append(echoRuns([]float64{10}, []float64{11})[:1], Run{Proxy: edgeFrames, Phase: "echo", Repeat: 1, Error: "edge-frames exited"})}
	if md := render([]Result{res}); !strings.Contains(md, "| — | **not measured (needs the echo phase of both edge and edge-frames)** |") {
		t.Errorf("report lacks the unmeasured target:\n%s", md)
	}
	res = Result{Runs: echoRuns([]float64{10}, []float64{11})[:1]}
	if md := render([]Result{res}); strings.Contains(md, "Frame-aware") || strings.Contains(md, "## Targets") {
		t.Errorf("frame-aware section without edge-frames:\n%s", md)
	}
}

// TestEdgeConfigs loads both generated edge configurations with edge's own
// parser: they differ by the websocket block alone.
func TestEdgeConfigs(t *testing.T) {
	dir := t.TempDir()
	if err := writeCert(dir); err != nil {
		t.Fatal(err)
	}
	r := &runner{dir: dir, addrs: addrsOn("127.0.0.1")}
	load := func(proxy string) (*conf.Config, string) {
		t.Helper()
		path, err := r.renderConfig("edge.yaml.tmpl", proxy+".yaml", r.configFor(proxy))
		if err != nil {
			t.Fatal(err)
		}
		c, err := conf.Load(path)
		if err != nil {
			t.Fatalf("%s: %v", proxy, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return c, string(b)
	}
	opaque, opaqueText := load("edge")
	framed, framedText := load(edgeFrames)
	// Opaque: no frame or message limit and no pings (linger settings apply
	// to any close edge sends and do not make the splice frame-aware).
	if ws := opaque.Pools[0].WebSocket; ws.MaxFrameBytes != 0 || ws.MaxMessageBytes != 0 || ws.PingInterval != 0 || ws.PingTimeout != 0 {
		t.Errorf("edge pool websocket = %+v, want opaque mode", ws)
	}
	ws := framed.Pools[0].WebSocket
	if ws.MaxFrameBytes != 1048576 || time.Duration(ws.PingInterval) != 30*time.Second || time.Duration(ws.PingTimeout) != 10*time.Second {
		t.Errorf("edge-frames pool websocket = %+v, want 1048576, 30s, 10s", ws)
	}
	extra, ok := strings.CutPrefix(framedText, opaqueText)
	if !ok || strings.Count(extra, "\n") != 1 || !strings.HasPrefix(extra, "    websocket: {") {
		t.Errorf("edge-frames.yaml is not edge.yaml plus one websocket line; extra: %q", extra)
	}
}

func TestPortsFree(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	busy := ln.Addr().String()
	if err := portsFree([]string{busy}); err == nil {
		t.Errorf("portsFree(%s) = nil while listening", busy)
	}
	_ = ln.Close()
	if err := portsFree([]string{busy}); err != nil {
		t.Errorf("portsFree(%s) after close: %v", busy, err)
	}
}

// TestRenderTargets: each target is edge's median over the right anchor's
// (HAProxy, or the lower of HAProxy and nginx), with its verdict.
func TestRenderTargets(t *testing.T) {
	run := func(proxy, phase, key string, v float64) Run {
		return Run{Proxy: proxy, Phase: phase, Repeat: 1, Metrics: map[string]float64{key: v}}
	}
	res := Result{Runs: []Run{
		run("edge", "idle", "kib_per_conn", 8), run("haproxy", "idle", "kib_per_conn", 18), run("nginx", "idle", "kib_per_conn", 4),
		run("edge", "echo", "cpu_us_per_msg", 30), run("haproxy", "echo", "cpu_us_per_msg", 50), run("nginx", "echo", "cpu_us_per_msg", 40),
		run("edge", "connect-full", "cpu_us_per_upgrade", 600), run("haproxy", "connect-full", "cpu_us_per_upgrade", 700),
	}}
	md := render([]Result{res})
	reporttest.Contains(t, md,
		"## Targets",
		// Against HAProxy even though nginx is lower.
		"| RSS per idle wss connection, edge / HAProxy: ≤ 0.50× | 0.44× (HAProxy) | **met** |",
		// Against the better anchor.
		"| closed-loop echo CPU-µs/msg, edge / the better of HAProxy and nginx: ≤ 0.80× | 0.75× (nginx) | **met** |",
		"| full handshake + upgrade CPU-µs, edge / the better: ≤ 0.60× | 0.86× (HAProxy) | **not met** |",
		"[FLEET.md](FLEET.md)",
	)
	// Unmeasured targets are left out.
	if strings.Contains(md, "resumed handshake + upgrade CPU-µs, edge") || strings.Contains(md, "p99 latency, edge / HAProxy") {
		t.Errorf("report shows unmeasured targets:\n%s", md)
	}
}

// TestRenderCPURatios: every CPU ratio is the median of the per-repeat
// ratios to the better anchor of that repeat, with their range, and the
// CPU targets are judged on that median.
func TestRenderCPURatios(t *testing.T) {
	run := func(proxy, phase string, rep int, v float64) Run {
		key := "cpu_us_per_msg"
		if phase != "echo" {
			key = "cpu_us_per_upgrade"
		}
		return Run{Proxy: proxy, Phase: phase, Repeat: rep, Client: "gobwas", Metrics: map[string]float64{key: v}}
	}
	res := Result{Runs: []Run{
		// Repeat 1: nginx is better (20): 10/20 = 0.5.
		run("edge", "echo", 1, 10), run("haproxy", "echo", 1, 25), run("nginx", "echo", 1, 20),
		// Repeat 2: HAProxy is better (10): 12/10 = 1.2.
		run("edge", "echo", 2, 12), run("haproxy", "echo", 2, 10), run("nginx", "echo", 2, 30),
		// Repeat 3: 8/10 = 0.8.
		run("edge", "echo", 3, 8), run("haproxy", "echo", 3, 10), run("nginx", "echo", 3, 40),
		// Repeat 4 has no anchor and is left out.
		run("edge", "echo", 4, 1),
		run("edge", "connect-full", 1, 800), run("nginx", "connect-full", 1, 1000),
	}}
	md := render([]Result{res})
	reporttest.Contains(t, md,
		"## CPU ratios per repeat",
		"| closed-loop echo CPU-µs/msg, edge / the better anchor | 0.80× (0.50–1.20) | 3 | HAProxy ×2, nginx ×1 |",
		"| full handshake + upgrade CPU-µs, edge / the better anchor | 0.80× | 1 | nginx |",
		"| closed-loop echo CPU-µs/msg, edge / the better, median of per-repeat ratios: ≤ 0.70× | 0.80× (0.50–1.20) (HAProxy ×2, nginx ×1) | **not met** |",
		"| full handshake + upgrade CPU-µs, edge / the better, median of per-repeat ratios: ≤ 0.90× | 0.80× (nginx) | **met** |",
		"- **Client:** gobwas in every run",
	)
	if strings.Contains(md, "resumed handshake + upgrade CPU-µs, edge / the better anchor") {
		t.Errorf("report shows an unmeasured ratio:\n%s", md)
	}
}

// TestRenderMemoryTargets: the absolute memory targets judge edge and show
// the anchors' figures and verdicts beside it; results without a client
// name come from gorilla.
func TestRenderMemoryTargets(t *testing.T) {
	run := func(proxy, phase string, v float64) Run {
		return Run{Proxy: proxy, Phase: phase, Repeat: 1, Metrics: map[string]float64{"kib_per_conn": v, "kib_per_conn_settled": v}}
	}
	res := Result{Runs: []Run{
		run("edge", "idle", 2.5), run("haproxy", "idle", 18.6), run("nginx", "idle", 43),
		run("edge", "idle-16k", 24), run("haproxy", "idle-16k", 18.6),
	}}
	md := render([]Result{res})
	reporttest.Contains(t, md,
		"| RSS per idle wss connection after one tiny echo (idle): ≤ 3.0 KiB | edge 2.5 KiB (HAProxy 18.6, nginx 43.0) | **met** (HAProxy: not met, nginx: not met) |",
		"| RSS per idle wss connection after one 16 KiB message (idle-16k): ≤ 3.0 KiB | edge 24.0 KiB (HAProxy 18.6) | **not met** (HAProxy: not met) |",
		"| RSS per idle wss connection, after one 16 KiB message each (KiB) | 24.0 | 18.6 | — | 1.29× | — |",
		"- **Client:** gorilla in every run",
	)
	if strings.Contains(md, "(idle-1m): ≤") {
		t.Errorf("report shows the unmeasured 1 MiB target:\n%s", md)
	}
}

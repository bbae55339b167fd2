package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/conf"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		n, k int
		want []int
	}{
		{"even", 9800, 4, []int{2450, 2450, 2450, 2450}},
		{"remainder first", 10, 3, []int{4, 3, 3}},
		{"more parts than items", 2, 5, []int{1, 1}},
		{"zero parts", 7, 0, []int{7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := split(tt.n, tt.k)
			if len(got) != len(tt.want) {
				t.Fatalf("split(%d, %d) = %v, want %v", tt.n, tt.k, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("split(%d, %d) = %v, want %v", tt.n, tt.k, got, tt.want)
				}
			}
		})
	}
}

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
		Machine:  Machine{NProc: 2, Model: "Test CPU", Kernel: "6.1", MemoryKB: 24 << 20, FDLimit: "20000/20000"},
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
	for _, want := range []string{
		"| metric | edge | HAProxy | nginx | edge / HAProxy | edge / nginx |",
		"| 11.00 (10.00–12.00) | 20.00 | 11.00 | 0.55× | 1.00× |",
		"2 × Test CPU",
		"`bench/run.sh`",
		"2026-01-02 03:04",
		"nginx idle repeat 1",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
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
	got := plan(allProxies, []string{"idle", "echo", "connect-full"})
	want := []step{
		{"idle", "edge"}, {"idle", "haproxy"}, {"idle", "nginx"},
		{"echo", "edge"}, {"echo", "edge-frames"}, {"echo", "haproxy"}, {"echo", "nginx"},
		{"connect-full", "edge"}, {"connect-full", "haproxy"}, {"connect-full", "nginx"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan = %v, want %v", got, want)
	}
	if got := plan([]string{"edge-frames"}, []string{"idle", "rate"}); len(got) != 0 {
		t.Errorf("edge-frames runs %v, want only the echo phase", got)
	}
}

// TestEdgeConfigs loads both generated edge configurations with edge's own
// parser: they differ by the websocket block alone.
func TestEdgeConfigs(t *testing.T) {
	dir := t.TempDir()
	if err := writeCert(dir); err != nil {
		t.Fatal(err)
	}
	r := &runner{dir: dir}
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
	if ws := opaque.Pools[0].WebSocket; ws != (conf.WebSocket{}) {
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

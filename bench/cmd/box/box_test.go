package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/conf"
)

// TestEdgeConfig: the generated edge configuration loads, is frame-aware
// with the run's pings, and leaves every admission limit at its default.
func TestEdgeConfig(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"cert.pem", "key.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := &box{}
	text, err := b.render("edge.yaml", tmplData{Dir: dir, Listen: "127.0.101.1:18443", Admin: "127.0.101.1:19901",
		Backends: []backendAddr{{"b1", "127.0.101.1:19001"}}, PingInterval: "30s", PingTimeout: "1m30s"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := conf.Load(path)
	if err != nil && !strings.Contains(err.Error(), "cert") {
		t.Fatal(err)
	}
	if c == nil {
		t.Skip("the empty certificate files are refused before the pool is read")
	}
	ws := c.Pools[0].WebSocket
	if time.Duration(ws.PingInterval) != 30*time.Second || time.Duration(ws.PingTimeout) != 90*time.Second || ws.MaxFrameBytes == 0 {
		t.Errorf("websocket = %+v, want frame-aware with pings every 30 s and a 90 s timeout", ws)
	}
	if l := c.Pools[0].Limits; l != offLimits {
		t.Errorf("pool limits = %+v, want the defaults (all off)", l)
	}
	if strings.Contains(text, "max_connections: 0") {
		t.Error("the global connection cap is turned off; admission must stay at its defaults")
	}
}

// TestPlan: processes follow the descriptor limit.
func TestPlan(t *testing.T) {
	o := options{conns: 100000, perProc: 9000}
	if err := plan(&o); err != nil {
		t.Fatal(err)
	}
	if o.procs != 12 || o.gens != 7 || o.backends != 7 {
		t.Errorf("plan: %d proxies, %d generators, %d backends; want 12, 7, 7", o.procs, o.gens, o.backends)
	}
	o = options{conns: 100000, procs: 2, perProc: 9000}
	if err := plan(&o); err == nil {
		t.Error("100,000 connections over 2 processes were accepted")
	}
}

// offLimits is a pool's limits with none set: every number 0 (off) and
// both scopes at their default, local.
var offLimits = conf.PoolLimits{MaxConnectionsPerBackendScope: conf.ScopeLocal, ConnectionRateScope: conf.ScopeLocal}

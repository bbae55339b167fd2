package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
)

// fleetLoadEdge is one edge process of a fleet sharing its load.
type fleetLoadEdge struct {
	*setup
	p *proc
}

// fleetLoadEdges starts n edges in front of bs following one Consul and
// the prefix edge/fleet; pool is appended to the pool's YAML.
func fleetLoadEdges(t *testing.T, agent *consultest.Agent, n int, bs []*testbackend.Server, pool string) []fleetLoadEdge {
	t.Helper()
	return fleetLoadEdgesBalance(t, agent, n, bs, "least_conn", pool)
}

// fleetLoadEdgesBalance is fleetLoadEdges with the pool's balance mode.
func fleetLoadEdgesBalance(t *testing.T, agent *consultest.Agent, n int, bs []*testbackend.Server, balance, pool string) []fleetLoadEdge {
	t.Helper()
	var out []fleetLoadEdge
	for range n {
		s := newSetup(t, bs, balance, pool+fmt.Sprintf("consul: {address: %q, fleet: {prefix: edge/fleet}}\n", agent.Addr))
		out = append(out, fleetLoadEdge{setup: s, p: startEdge(t, s.cfg)})
	}
	for _, e := range out {
		e.awaitFleet(t, "every edge fresh and seeing the fleet", func(d fleetStatusDoc) bool {
			return !d.Stale && len(d.Snapshot.Edges) == n
		})
	}
	return out
}

// fleetStatusDoc is the fleet entry of /status as the tests read it.
type fleetStatusDoc struct {
	fleet.LoadStatus
	Snapshot fleet.Snapshot     `json:"snapshot"`
	Limits   []fleet.PoolLimits `json:"limits"`
}

func (e fleetLoadEdge) fleetDoc(t *testing.T) fleetStatusDoc {
	t.Helper()
	var st struct {
		Fleet *fleetStatusDoc `json:"fleet"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, e.admin, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Fleet == nil {
		t.Fatal("/status has no fleet")
	}
	return *st.Fleet
}

func (e fleetLoadEdge) awaitFleet(t *testing.T, what string, cond func(fleetStatusDoc) bool) {
	t.Helper()
	testkit.Await(t, 60*time.Second, what, func() (bool, string) {
		d := e.fleetDoc(t)
		b, _ := json.Marshal(d)
		return cond(d), string(b)
	})
}

// holdClients runs testdata/fleetlimit.js: count WebSockets over urls, 60
// handshakes at a time, a refused client trying again up to retries times,
// all held until the returned release is called.
func holdClients(t *testing.T, count, retries int, urls []string) (opened map[string]int, refused map[string]int, release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	cmd := interop.Node(t, ctx, "testdata/fleetlimit.js", fmt.Sprint(count), "60", strings.Join(urls, ","), fmt.Sprint(retries))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	release = func() {
		_ = stdin.Close()
		_ = cmd.Wait()
		cancel()
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("node fleetlimit.js: %v\n%s", err, stderr.String())
	}
	var got struct {
		Opened   map[string]int `json:"opened"`
		Refused  map[string]int `json:"refused"`
		Attempts int            `json:"attempts"`
		Failed   int            `json:"failed"`
	}
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("node fleetlimit.js printed %q: %v", line, err)
	}
	if got.Failed != 0 {
		t.Fatalf("%d connections failed without an HTTP answer (%s)", got.Failed, stderr.String())
	}
	t.Logf("%d clients made %d attempts", count, got.Attempts)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return got.Opened, got.Refused, release
}

func wsURLs(edges []fleetLoadEdge) []string {
	var out []string
	for _, e := range edges {
		out = append(out, "ws://"+e.ws+"/")
	}
	return out
}

// TestFleetScopeLimitHoldsAcrossEdges: three edges, six backends,
// max_connections_per_backend 150 of fleet scope, and 2,700 Node ws
// clients spread over the three edges, each refused one trying again three
// times: no backend holds more than 150 × 1.1 over the fleet, the fleet
// uses at least 90 % of its 900, and every other client is refused with
// 503.
func TestFleetScopeLimitHoldsAcrossEdges(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "b3", "b4", "b5", "b6")
	edges := fleetLoadEdges(t, agent, 3, bs, "    limits: {max_connections_per_backend: 150, max_connections_per_backend_scope: fleet}\n")
	for _, e := range edges {
		e.awaitFleet(t, "shares of 50 of 150 per backend on each of 3 edges before any load", func(d fleetStatusDoc) bool {
			return len(d.Limits) == 1 && d.Limits[0].Backends["b1"] == 50 && d.Limits[0].Backends["b6"] == 50
		})
	}
	// Refused clients come back, as real ones do: the shares move to where
	// they arrive at every publication, and the fleet fills its 900.
	opened, refused, release := holdClients(t, 2700, 3, wsURLs(edges))
	total, worst := 0, 0
	for _, b := range bs {
		n := b.Conns()
		total += n
		worst = max(worst, n)
		if n > 165 {
			t.Errorf("backend %s holds %d over the fleet, more than 150 × 1.1", b.ID, n)
		}
	}
	sum := 0
	for _, n := range opened {
		sum += n
	}
	if sum != total {
		t.Errorf("clients hold %d, backends %d", sum, total)
	}
	if total < 810 {
		t.Errorf("the fleet holds %d, want at least 90 %% of its 900", total)
	}
	if len(refused) != 1 || refused["503"] != 2700-sum {
		t.Errorf("refused %v, want the other %d all 503", refused, 2700-sum)
	}
	t.Logf("fleet-scope limit 150 over 3 edges: worst backend %d (overshoot %d), %d held, refused %v; per backend %v", worst, max(worst-150, 0), total, refused, opened)
	release()
	for i, e := range edges {
		d := e.fleetDoc(t)
		el := time.Since(d.Snapshot.Edges[0].Published) // any record: the edges started within seconds
		t.Logf("edge %c: %d Consul writes, %d wake-ups, propagation p50 %v p99 %v (%v after the first record)",
			'A'+i, d.Writes, d.Wakeups, d.DelayP50, d.DelayP99, el.Round(time.Second))
	}
}

// TestLocalScopeLimitPerEdge: the same fleet with the limit of local
// scope (the default) lets each edge hold 150 per backend, today's
// behaviour: 2,700 clients fill 450 per backend and none is refused.
func TestLocalScopeLimitPerEdge(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "b3", "b4", "b5", "b6")
	edges := fleetLoadEdges(t, agent, 3, bs, "    limits: {max_connections_per_backend: 150}\n")
	opened, refused, _ := holdClients(t, 2700, 0, wsURLs(edges))
	if len(refused) != 0 {
		t.Errorf("refused %v with per-edge limits that fit every client", refused)
	}
	for _, b := range bs {
		if n := b.Conns(); n != 450 {
			t.Errorf("backend %s holds %d, want 450 (150 through each edge)", b.ID, n)
		}
	}
	t.Logf("per backend %v", opened)
}

// TestFleetLoadKilledEdgeAndConsulOutage: SIGKILL of edge C takes its
// numbers out of the fleet's sums within its session's TTL (Consul
// invalidates a session between one and two TTLs after its last renewal);
// then Consul stopped: connections are still accepted on every edge, the
// fleet-scope limit falls back to the limit divided by the last known
// fleet size, /status and the metric show the staleness; Consul back
// (empty, as a dev agent restarts), the edges publish again and converge.
func TestFleetLoadKilledEdgeAndConsulOutage(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2")
	edges := fleetLoadEdges(t, agent, 3, bs, "    limits: {max_connections_per_backend: 60, max_connections_per_backend_scope: fleet}\n")
	a, c := edges[0], edges[2]
	for _, e := range edges {
		e.awaitFleet(t, "shares of 20 of 60 on each of 3 edges", func(d fleetStatusDoc) bool {
			return len(d.Limits) == 1 && d.Limits[0].Backends["b1"] == 20 && d.Limits[0].Backends["b2"] == 20
		})
	}
	for range 4 {
		conn, _, err := c.dialer().Dial("ws://"+c.ws+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
	}
	a.awaitFleet(t, "C's 4 connections in A's sums", func(d fleetStatusDoc) bool {
		return d.Snapshot.Total("app", "b1")+d.Snapshot.Total("app", "b2") == 4
	})
	killed := time.Now()
	if err := c.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.awaitFleet(t, "C's numbers gone from A's sums", func(d fleetStatusDoc) bool {
		return len(d.Snapshot.Edges) == 2 && d.Snapshot.Total("app", "b1")+d.Snapshot.Total("app", "b2") == 0
	})
	gone := time.Since(killed)
	t.Logf("a killed edge's record left the sums %v after SIGKILL (session TTL 10s)", gone.Round(100*time.Millisecond))
	if gone > 2*fleet.DefaultSessionTTL+5*time.Second {
		t.Errorf("a killed edge's numbers stayed %v, past two session TTLs", gone)
	}

	agent.Stop()
	stopped := time.Now()
	for _, e := range edges[:2] {
		e.awaitFleet(t, "stale and falling back", func(d fleetStatusDoc) bool {
			return d.Stale && len(d.Limits) == 1 && d.Limits[0].Fallback && d.Limits[0].Backends["b1"] == 30
		})
		if m := adminGet(t, e.admin, "/metrics"); !strings.Contains(m, "\nedge_fleet_stale 1\n") {
			t.Errorf("edge_fleet_stale is not 1 while Consul is down:\n%s", grepLines(m, "edge_fleet"))
		}
	}
	t.Logf("both edges stale and falling back %v after Consul stopped", time.Since(stopped).Round(100*time.Millisecond))
	// Consul stays down 20 s (the scenario, not a wait for an event):
	// every edge keeps accepting, at once, all along.
	dials, slowest := 0, time.Duration(0)
	for time.Since(stopped) < 20*time.Second {
		for _, e := range edges[:2] {
			start := time.Now()
			conn, _, err := e.dialer().Dial("ws://"+e.ws+"/", nil)
			if err != nil {
				t.Fatalf("a connection refused while Consul is down: %v", err)
			}
			testkit.Ask(t, conn, "whoami")
			_ = conn.Close()
			dials++
			slowest = max(slowest, time.Since(start))
		}
		time.Sleep(200 * time.Millisecond) // pacing of the dials above
	}
	t.Logf("%d connections accepted during the 20 s outage, the slowest in %v", dials, slowest)
	agent.Restart()
	for _, e := range edges[:2] {
		e.awaitFleet(t, "fresh again with both edges", func(d fleetStatusDoc) bool {
			return !d.Stale && len(d.Snapshot.Edges) == 2 && !d.Limits[0].Fallback && d.Limits[0].Backends["b1"] == 30
		})
		if m := adminGet(t, e.admin, "/metrics"); !strings.Contains(m, "\nedge_fleet_stale 0\n") {
			t.Errorf("edge_fleet_stale is not 0 after Consul returned:\n%s", grepLines(m, "edge_fleet"))
		}
	}
}

// TestClientIPFleetSharingKeepsEachAddress: three edges sharing their load
// through Consul, a client_ip pool, and 49 addresses opening 4 Node ws
// connections each over the three edges: every address keeps the backend
// the hash names on every edge (fleet counts never reach client_ip).
func TestClientIPFleetSharingKeepsEachAddress(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "b3")
	edges := fleetLoadEdgesBalance(t, agent, 3, bs, "client_ip", "")
	counts := map[string]int{}
	for i := 2; i <= 50; i++ {
		counts[fmt.Sprintf("127.0.0.%d", i)] = 4
	}
	got := runClientIPScript(t, 10, wsURLs(edges), counts)
	agree := 0
	for _, p := range got {
		if p.Backend == hashOwner(t, []string{"b1", "b2", "b3"}, p.Local) {
			agree++
		} else {
			t.Errorf("%s via %s: backend %s, want the hash's", p.Local, p.URL, p.Backend)
		}
	}
	t.Logf("%d of %d connections on the backend the hash names (%.1f %%)", agree, len(got), 100*float64(agree)/float64(len(got)))
}

// TestFleetLoadConsulTraffic measures what the fleet load costs Consul:
// three edges for 30 s, each with one connection opened and one closed
// every second (so its record changes at every publication), then 30 s
// idle. Every edge writes at most one record every 2 s plus its session
// renewals (every TTL/3), whatever happens. EDGE_FLEET_EDGES sets another
// fleet size (docs/FLEET.md gives the figures for 3 and 10).
func TestFleetLoadConsulTraffic(t *testing.T) {
	n := 3
	if v := os.Getenv("EDGE_FLEET_EDGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 || n > 16 {
			t.Fatalf("EDGE_FLEET_EDGES=%q: want 2..16", v)
		}
	}
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2")
	edges := fleetLoadEdges(t, agent, n, bs, "")
	count := func() (writes, wakeups []int64) {
		for _, e := range edges {
			d := e.fleetDoc(t)
			writes, wakeups = append(writes, d.Writes), append(wakeups, d.Wakeups)
		}
		return writes, wakeups
	}
	perMinute := func(phase string, w0, k0, w1, k1 []int64, d time.Duration) {
		for i := range edges {
			w := float64(w1[i]-w0[i]) / d.Minutes()
			k := float64(k1[i]-k0[i]) / d.Minutes()
			t.Logf("%s: edge %c: %.1f Consul writes and %.1f blocking-query wake-ups per minute", phase, 'A'+i, w, k)
			// 30 record writes and 18 renewals a minute at most, and the
			// session a restart of it would add.
			if w > 30+18+2 {
				t.Errorf("%s: edge %c writes %.1f times a minute", phase, 'A'+i, w)
			}
		}
	}
	const phase = 30 * time.Second
	w0, k0 := count()
	start := time.Now()
	var held []interface{ Close() error }
	for time.Since(start) < phase {
		for _, e := range edges {
			c, _, err := e.dialer().Dial("ws://"+e.ws+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			testkit.Ask(t, c, "whoami")
			held = append(held, c)
			if len(held) > 6 {
				_ = held[0].Close()
				held = held[1:]
			}
		}
		time.Sleep(time.Second) // the churn's pace, not a wait for an event
	}
	w1, k1 := count()
	perMinute("churn", w0, k0, w1, k1, time.Since(start))
	for _, c := range held {
		_ = c.Close()
	}
	start = time.Now()
	time.Sleep(phase) // the idle phase measured
	w2, k2 := count()
	perMinute("idle", w1, k1, w2, k2, time.Since(start))
}

// TestFleetScopeReloadToLocal: two edges share max_connections_per_backend
// 4 (2 each); edge A reloaded with the limit back in local scope holds 4
// on its own again, within a second of the reload.
func TestFleetScopeReloadToLocal(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1")
	edges := fleetLoadEdges(t, agent, 2, bs, "    limits: {max_connections_per_backend: 4, max_connections_per_backend_scope: fleet}\n")
	a := edges[0]
	for _, e := range edges {
		e.awaitFleet(t, "shares of 2 of 4", func(d fleetStatusDoc) bool {
			return len(d.Limits) == 1 && d.Limits[0].Backends["b1"] == 2
		})
	}
	dial := func() (int, func()) {
		c, resp, err := a.dialer().Dial("ws://"+a.ws+"/", nil)
		if err != nil {
			if resp == nil {
				t.Fatal(err)
			}
			return resp.StatusCode, func() {}
		}
		testkit.Ask(t, c, "whoami")
		return 101, func() { _ = c.Close() }
	}
	var statuses []int
	for range 3 {
		st, done := dial()
		defer done()
		statuses = append(statuses, st)
	}
	if fmt.Sprint(statuses) != "[101 101 503]" {
		t.Fatalf("through A with a share of 2: %v, want [101 101 503]", statuses)
	}
	certFile, keyFile := filepath.Join(a.dir, "cert.pem"), filepath.Join(a.dir, "key.pem")
	a.write(t, bs, "least_conn", "    limits: {max_connections_per_backend: 4}\n"+fmt.Sprintf("consul: {address: %q, fleet: {prefix: edge/fleet}}\n", agent.Addr), certFile, keyFile)
	if err := a.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	a.p.waitLog(t, "configuration reloaded")
	a.awaitFleet(t, "no fleet-scope limit on A after the reload", func(d fleetStatusDoc) bool { return len(d.Limits) == 0 })
	statuses = nil
	for range 3 {
		st, done := dial()
		defer done()
		statuses = append(statuses, st)
	}
	if fmt.Sprint(statuses) != "[101 101 503]" {
		t.Fatalf("through A with its own limit of 4 (2 held): %v, want [101 101 503]", statuses)
	}
}

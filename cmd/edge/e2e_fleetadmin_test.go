package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
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
	"github.com/hashicorp/consul/api"
)

// fleetAdminEdge is one edge of a fleet sharing consul.fleet.prefix.
type fleetAdminEdge struct {
	*setup
	p *proc
}

// startFleetAdminEdges starts n edges in front of bs, following one
// Consul's fleet prefix edge/fleet.
func startFleetAdminEdges(t *testing.T, agent *consultest.Agent, bs []*testbackend.Server, n int) []*fleetAdminEdge {
	t.Helper()
	var out []*fleetAdminEdge
	for range n {
		s := newSetup(t, bs, "least_conn", fmt.Sprintf("consul: {address: %q, fleet: {prefix: edge/fleet}}\n", agent.Addr))
		out = append(out, &fleetAdminEdge{setup: s, p: startEdge(t, s.cfg)})
	}
	return out
}

// restart stops the edge (SIGTERM, its drain) and starts it again on the
// same file and state_dir.
func (e *fleetAdminEdge) restart(t *testing.T) {
	t.Helper()
	if err := e.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-e.p.done
	e.p.done <- err // for the cleanup that waits on it too
	e.p = startEdge(t, e.cfg)
}

// nodeClose is one connection of a nodeHold closed by the other side.
type nodeClose struct {
	conn, code string
	at         time.Time
}

// nodeHold is a Node `ws` client holding connections through one edge.
type nodeHold struct {
	on     map[string]string // connection index -> backend
	closes chan nodeClose    // closed when the process's output ends
}

// holdNode opens n connections through e with the npm ws client and keeps
// them; the process is killed when the test ends.
func holdNode(t *testing.T, ctx context.Context, e *fleetAdminEdge, n int) *nodeHold {
	t.Helper()
	cmd := interop.Node(t, ctx, "testdata/fleetdrain.js", "ws://"+e.ws+"/", strconv.Itoa(n), "hold")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &nodeHold{on: map[string]string{}, closes: make(chan nodeClose, n)}
	lines := bufio.NewScanner(out)
	for len(h.on) < n && lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "open" {
			h.on[f[1]] = f[2]
		}
	}
	if len(h.on) < n {
		t.Fatalf("node opened %d of %d connections", len(h.on), n)
	}
	// Owned by the test: it ends when the process's output does (killed
	// at cleanup).
	go func() {
		defer close(h.closes)
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) != 4 || f[0] != "close" {
				continue
			}
			ms, _ := strconv.ParseInt(f[3], 10, 64)
			h.closes <- nodeClose{conn: f[1], code: f[2], at: time.UnixMilli(ms)}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for range h.closes {
			// Drain until the reader ends.
		}
	})
	return h
}

// on returns the connections the hold has on backend id.
func (h *nodeHold) onBackend(id string) []string {
	var out []string
	for c, b := range h.on {
		if b == id {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// probeNode opens n connections through e with the npm ws client, one
// after another, and returns how many each backend took.
func probeNode(t *testing.T, e *fleetAdminEdge, n int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := interop.Node(t, ctx, "testdata/fleetdrain.js", "ws://"+e.ws+"/", strconv.Itoa(n), "probe").Output()
	if err != nil {
		t.Fatalf("node probe: %v", err)
	}
	got := map[string]int{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "open" {
			got[f[2]]++
		}
	}
	return got
}

// TestFleetDrainThroughOneEdge: three edges follow one fleet prefix, each
// holding Node ws clients on three backends. A drain of b1 through edge B
// with fleet scope is in force on every edge within a second (no new
// client reaches b1 through any of them), every b1 client on every edge
// gets 1012 spread over the drain window while the others stay, and edge
// C, restarted afterwards, applies the drain before it serves. A hostile
// entry is refused with a log line on every edge and changes nothing;
// enable through edge A with fleet scope brings b1 back everywhere.
func TestFleetDrainThroughOneEdge(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "b3")
	edges := startFleetAdminEdges(t, agent, bs, 3)
	a, b, c := edges[0], edges[1], edges[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var holds []*nodeHold
	onB1 := 0
	for i, e := range edges {
		h := holdNode(t, ctx, e, 9)
		if len(h.onBackend("b1")) == 0 {
			t.Fatalf("edge %c placed %v: want clients on b1", 'A'+i, h.on)
		}
		onB1 += len(h.onBackend("b1"))
		holds = append(holds, h)
	}

	fleetViewShows(t, a, 3, int64(9*len(edges)))

	const window = 3 * time.Second
	start := time.Now()
	doc := b.mustAPI(t, "POST", "/api/v1/pools/app/backends/b1/drain?scope=fleet", `{"window": "3s"}`)
	if doc["scope"] != "fleet" || doc["admin_state"] != "drain" || doc["closing"] != float64(len(holds[1].onBackend("b1"))) {
		t.Fatalf("drain answer %v: want scope fleet, drain, closing %d", doc, len(holds[1].onBackend("b1")))
	}
	for i, e := range edges {
		testkit.Await(t, 5*time.Second, fmt.Sprintf("edge %c has b1 drained", 'A'+i), func() (bool, string) {
			st := e.statusBackend(t, "app", "b1")
			return st["admin_state"] == "drain", fmt.Sprint(st)
		})
	}
	took := time.Since(start)
	t.Logf("drain through edge B in force on all three edges %v after the request", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("the fleet drain took %v to reach every edge, want within 1s", took)
	}
	for i, e := range edges {
		if got := probeNode(t, e, 6); got["b1"] != 0 {
			t.Errorf("edge %c after the fleet drain sent new clients %v, want none on b1", 'A'+i, got)
		}
	}
	closes := awaitDrainCloses(t, holds, "b1", onB1, start.Add(window+5*time.Second))
	first, last := closes[0].at, closes[len(closes)-1].at
	t.Logf("%d clients on b1 over three edges closed with 1012 from %v to %v after the request", len(closes),
		first.Sub(start).Round(time.Millisecond), last.Sub(start).Round(time.Millisecond))
	if last.Sub(first) < window/10 {
		t.Errorf("the 1012s came within %v of each other: want them spread over the %v window", last.Sub(first), window)
	}

	c.restart(t)
	restartedHonoursDrain(t, c)

	hostileEntry(t, agent, edges)

	a.mustAPI(t, "POST", "/api/v1/pools/app/backends/b1/enable?scope=fleet", "")
	for i, e := range edges {
		testkit.Await(t, 5*time.Second, fmt.Sprintf("edge %c has b1 back", 'A'+i), func() (bool, string) {
			st := e.statusBackend(t, "app", "b1")
			return st["admin_state"] == "ready" && st["available"] == true, fmt.Sprint(st)
		})
	}
	// Edge A holds its clients on b2 and b3 only: least connections sends
	// new ones to b1 whenever it is one of the two candidates drawn.
	if h := holdNode(t, ctx, a, 9); len(h.onBackend("b1")) == 0 {
		t.Errorf("edge A after the fleet enable placed %v, want b1 among them", h.on)
	}
}

// fleetViewShows waits until e's /status shows the fleet's records of
// edges edges and the fleet's totals count active connections in pool app,
// and checks the status page shows every edge and the totals.
func fleetViewShows(t *testing.T, e *fleetAdminEdge, edges int, active int64) {
	t.Helper()
	var st struct {
		Fleet struct {
			Snapshot fleet.Snapshot `json:"snapshot"`
		} `json:"fleet"`
		Totals []fleet.PoolTotal `json:"fleet_totals"`
	}
	testkit.Await(t, 20*time.Second, "the fleet's records and totals in /status", func() (bool, string) {
		if err := json.Unmarshal([]byte(adminGet(t, e.admin, "/status")), &st); err != nil {
			t.Fatal(err)
		}
		return len(st.Fleet.Snapshot.Edges) == edges && len(st.Totals) == 1 && st.Totals[0].Active == active,
			fmt.Sprintf("%d edges, totals %+v", len(st.Fleet.Snapshot.Edges), st.Totals)
	})
	page := adminGet(t, e.admin, "/")
	for _, r := range st.Fleet.Snapshot.Edges {
		if r.Connections != 9 || !r.Ready || r.PID == 0 || r.Version == "" {
			t.Errorf("edge record %+v: want ready, 9 connections, a pid and a version", r)
		}
		if !strings.Contains(page, fmt.Sprintf(`<tr class="fleet-edge" data-edge="%s">`, r.ID)) {
			t.Errorf("the status page lacks edge %s", r.ID)
		}
	}
	if want := fmt.Sprintf(`<td>app</td><td>all (%d edges)</td><td class="n">%d</td>`, edges, active); !strings.Contains(page, want) {
		t.Errorf("the status page lacks the fleet's total %s", want)
	}
}

// restartedHonoursDrain checks an edge restarted after the fleet drained
// b1: it applied the drain before it started serving, sends no new client
// there, and shows the action in /status and on the status page.
func restartedHonoursDrain(t *testing.T, c *fleetAdminEdge) {
	t.Helper()
	log := c.p.logs()
	applied, started := strings.Index(log, `"msg":"fleet action applied"`), strings.Index(log, `"msg":"edge started"`)
	if applied < 0 || applied > started {
		t.Errorf("restarted edge C: the fleet drain was not applied before it started serving:\n%s", log)
	}
	if st := c.statusBackend(t, "app", "b1"); st["admin_state"] != "drain" {
		t.Errorf("restarted edge C: b1 is %v, want drain", st["admin_state"])
	}
	if got := probeNode(t, c, 6); got["b1"] != 0 {
		t.Errorf("restarted edge C sent new clients %v, want none on b1", got)
	}
	var st struct {
		FleetActions fleet.ActionsStatus `json:"fleet_actions"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, c.admin, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	if as := st.FleetActions.Actions; len(as) != 1 || as[0].Backend != "b1" || as[0].State != "drain" || !as[0].Applied || as[0].Window != 3 || as[0].By == "" {
		t.Errorf("restarted edge C: /status fleet_actions %+v, want b1 drained over 3s by edge B, applied", st.FleetActions)
	}
	if page := adminGet(t, c.admin, "/"); !strings.Contains(page, `<tr class="fleet-action" data-pool="app" data-backend="b1"><td>app</td><td>b1</td><td>drain</td>`) {
		t.Errorf("restarted edge C: the status page does not show the fleet's drain of b1")
	}

}

// awaitDrainCloses collects the closes of the holds until every client on
// backend (n of them) has one, before deadline, and checks each is 1012
// and that no client of another backend was closed. It returns the closes
// in time order.
func awaitDrainCloses(t *testing.T, holds []*nodeHold, backend string, n int, deadline time.Time) []nodeClose {
	t.Helper()
	var got []nodeClose
	for i, h := range holds {
		want := len(h.onBackend(backend))
		for range want {
			select {
			case cl, ok := <-h.closes:
				if !ok {
					t.Fatalf("edge %c: the node client ended early", 'A'+i)
				}
				if h.on[cl.conn] != backend || cl.code != "1012" {
					t.Errorf("edge %c: connection %s on %s closed with %s; want only %s's clients, with 1012", 'A'+i, cl.conn, h.on[cl.conn], cl.code, backend)
				}
				got = append(got, cl)
			case <-time.After(time.Until(deadline)):
				t.Fatalf("edge %c: %d of %d clients on %s closed by %v", 'A'+i, len(got), n, backend, deadline)
			}
		}
	}
	slices.SortFunc(got, func(x, y nodeClose) int { return x.at.Compare(y.at) })
	return got
}

// hostileEntry writes an entry with a weight out of range for b2 under the
// prefix: every edge logs the refusal and b2 stays as it was.
func hostileEntry(t *testing.T, agent *consultest.Agent, edges []*fleetAdminEdge) {
	t.Helper()
	v := `{"v":1,"state":"disabled","weight":5000000,"at":"2026-12-02T00:00:00Z"}`
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: "edge/fleet/admin/app/b2", Value: []byte(v)}, nil); err != nil {
		t.Fatal(err)
	}
	for i, e := range edges {
		e.p.waitLog(t, `"msg":"fleet action refused; nothing changed"`)
		if st := e.statusBackend(t, "app", "b2"); st["admin_state"] != "ready" || st["weight"] != 1.0 {
			t.Errorf("edge %c: b2 is %v, weight %v after a hostile entry; want ready and 1", 'A'+i, st["admin_state"], st["weight"])
		}
	}
	if _, err := agent.Client.KV().Delete("edge/fleet/admin/app/b2", nil); err != nil {
		t.Fatal(err)
	}
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// fleetTarget is one edge's pools as Actions sees them, with the
// drains it was asked for.
type fleetTarget struct {
	mu     sync.Mutex
	ids    []string
	pools  map[string]*balance.Pool
	drains []string // "pool/backend window"
}

// newFleetTarget is an edge whose pool app has members ids, built once
// the edge's Actions exist (build), as cmd/edge builds its pools.
func newFleetTarget(t *testing.T, ids ...string) *fleetTarget {
	return &fleetTarget{ids: ids, pools: map[string]*balance.Pool{}}
}

// build makes pool app with the fleet layer of f, and its members.
func (f *fleetTarget) build(t *testing.T, a *Actions) {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Name: "app", Fleet: a.Layer("app")})
	if err != nil {
		t.Fatal(err)
	}
	var ms []balance.Member
	for _, id := range f.ids {
		ms = append(ms, balance.Member{ID: id, Addr: "127.0.0.1:1"})
	}
	if err := p.Update(ms); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.pools["app"] = p
	f.mu.Unlock()
}

func (f *fleetTarget) Pool(name string) *balance.Pool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pools[name]
}

func (f *fleetTarget) DrainConns(b *balance.Backend, window time.Duration) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drains = append(f.drains, fmt.Sprintf("%s %s", b.ID(), window))
	return 1
}

func (f *fleetTarget) drained() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.drains...)
}

// state returns the admin state and weight of backend id of pool app.
func (f *fleetTarget) state(id string) string {
	b := f.Pool("app").Snapshot().ByID(id)
	if b == nil {
		return "absent"
	}
	return fmt.Sprintf("%s/%d", b.AdminState(), b.Weight())
}

// testFleetActions is one edge's follower, running.
type testFleetActions struct {
	f      *Actions
	target *fleetTarget
	log    *testkit.Buffer
	cancel context.CancelFunc
	done   chan struct{}
}

func newTestFleetActions(t *testing.T, c *api.Client, edge string, target *fleetTarget) *testFleetActions {
	t.Helper()
	e := &testFleetActions{target: target, log: &testkit.Buffer{}, done: make(chan struct{})}
	f, err := NewActions(ActionsOptions{
		Client: c, Prefix: "edge", Edge: edge, Target: target, WaitTime: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(e.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.f = f
	target.build(t, f)
	return e
}

func (e *testFleetActions) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { defer close(e.done); _ = e.f.Run(ctx) }()
	t.Cleanup(e.stop)
}

func (e *testFleetActions) stop() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
	}
}

// TestFleetActionsFollowedByEveryEdge: a drain written through edge A is
// applied on A at once and on B by its blocking query, with B's live
// connections asked to close once over the drain's window; an edge that
// starts afterwards applies it in Load, before it would serve, without
// draining again what it never held twice; a weight on top keeps the
// drain; enable clears it everywhere and deletes the entry.
func TestFleetActionsFollowedByEveryEdge(t *testing.T) {
	agent := consultest.Start(t)
	a := newTestFleetActions(t, boundedClient(t, agent.Addr), "edge-a", newFleetTarget(t, "b1", "b2"))
	b := newTestFleetActions(t, boundedClient(t, agent.Addr), "edge-b", newFleetTarget(t, "b1", "b2"))
	for _, e := range []*testFleetActions{a, b} {
		if err := e.f.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.run(t)
	}
	ctx := context.Background()
	act, closing, err := a.f.Act(ctx, "app", "b1", func(x *Action) { x.State, x.Window, x.DrainAt = balance.AdminDrain, 3*time.Second, time.Time{} })
	if err != nil {
		t.Fatal(err)
	}
	if closing != 1 || act.By != "edge-a" || a.target.state("b1") != "drain/1" {
		t.Fatalf("on the writing edge: closing %d, by %q, state %s; want 1, edge-a, drain/1", closing, act.By, a.target.state("b1"))
	}
	awaitState(t, "b1", "drain/1", b)
	if got := b.target.drained(); len(got) != 1 || got[0] != "b1 3s" {
		t.Errorf("edge B drained %v, want b1 once over 3s", got)
	}
	if got := a.target.drained(); len(got) != 1 {
		t.Errorf("edge A drained %v: its own blocking query must not drain again", got)
	}

	c := startedAfter(t, boundedClient(t, agent.Addr))

	// A weight on top of the drain keeps it.
	if _, _, err := b.f.Act(ctx, "app", "b1", func(x *Action) { x.Weight = 7 }); err != nil {
		t.Fatal(err)
	}
	awaitState(t, "b1", "drain/7", a, b, c)
	if got := b.target.drained(); len(got) != 1 {
		t.Errorf("edge B drained %v: a weight change is not a new drain", got)
	}
	if st := c.f.Status(); len(st.Actions) != 1 || st.Actions[0] != (ActionDoc{Pool: "app", Backend: "b1", State: "drain", Weight: 7,
		Window: 3, At: st.Actions[0].At, By: "edge-b", Applied: true}) {
		t.Errorf("status %+v", st)
	}

	// Enable and weight 0: no action left, the entry is deleted.
	if _, _, err := c.f.Act(ctx, "app", "b1", func(x *Action) { x.State, x.Weight = balance.AdminReady, 0 }); err != nil {
		t.Fatal(err)
	}
	awaitState(t, "b1", "ready/1", a, b, c)
	if pairs, _, err := agent.Client.KV().List("edge/admin/", nil); err != nil || len(pairs) != 0 {
		t.Errorf("entries left: %v, %v", pairs, err)
	}
	if _, _, err := a.f.Act(ctx, "app", "b9", func(x *Action) { x.State = balance.AdminDisabled }); !errors.Is(err, ErrNoSuchBackend) {
		t.Errorf("an action on a backend this edge lacks: %v, want ErrNoSuchBackend", err)
	}
}

// startedAfter starts an edge after b1 was drained: the drain is in force
// after Load alone, before it would serve.
func startedAfter(t *testing.T, c *api.Client) *testFleetActions {
	t.Helper()
	e := newTestFleetActions(t, c, "edge-c", newFleetTarget(t, "b1", "b2"))
	if err := e.f.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.target.state("b1") != "drain/1" {
		t.Fatalf("a starting edge: b1 is %s after Load, want drain/1", e.target.state("b1"))
	}
	e.run(t)
	return e
}

// awaitState waits until backend id is in state want on every edge.
func awaitState(t *testing.T, id, want string, edges ...*testFleetActions) {
	t.Helper()
	for _, e := range edges {
		testkit.Await(t, 5*time.Second, id+" "+want+" on "+e.f.opts.Edge, func() (bool, string) {
			return e.target.state(id) == want, e.target.state(id)
		})
	}
}

// TestFleetActionsJoiningBackend: an action on a backend this edge does
// not have yet is held, said so once, and in force in the very snapshot
// that adds the backend (the pool holds the fleet's layer).
func TestFleetActionsJoiningBackend(t *testing.T) {
	agent := consultest.Start(t)
	writer := newTestFleetActions(t, boundedClient(t, agent.Addr), "w", newFleetTarget(t, "b1", "b3"))
	if _, _, err := writer.f.Act(context.Background(), "app", "b3", func(x *Action) { x.State = balance.AdminDisabled }); err != nil {
		t.Fatal(err)
	}
	e := newTestFleetActions(t, boundedClient(t, agent.Addr), "e", newFleetTarget(t, "b1"))
	if err := e.f.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.f.Status(); len(st.Actions) != 1 || st.Actions[0].Applied {
		t.Fatalf("status %+v: want the action, not applied", st.Actions)
	}
	if !strings.Contains(e.log.String(), "fleet action names no backend of this edge") {
		t.Errorf("log lacks the missing backend:\n%s", e.log)
	}
	p := e.target.Pool("app")
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1"}, {ID: "b3", Addr: "127.0.0.1:3"}}); err != nil {
		t.Fatal(err)
	}
	if got := e.target.state("b3"); got != "disabled/1" {
		t.Fatalf("b3 joined as %s, want disabled/1", got)
	}
	if st := e.f.Status(); !st.Actions[0].Applied {
		t.Errorf("status %+v: want applied", st.Actions)
	}
}

// TestFleetActionsRefuseHostileEntries: whoever can write the prefix puts
// a huge value, one naming a backend that does not exist, a weight out of
// range, another version, a key in another escaping, and overwrites a
// valid drain with garbage: each is refused with a log line, nothing
// changes on the edge (the drain stays), and the status counts them.
func TestFleetActionsRefuseHostileEntries(t *testing.T) {
	agent := consultest.Start(t)
	e := newTestFleetActions(t, boundedClient(t, agent.Addr), "e", newFleetTarget(t, "b1", "b2"))
	if err := e.f.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.run(t)
	if _, _, err := e.f.Act(context.Background(), "app", "b2", func(x *Action) { x.State = balance.AdminDrain }); err != nil {
		t.Fatal(err)
	}
	kv := agent.Client.KV()
	at := `"at":"2026-12-02T00:00:00Z"`
	hostile := map[string]string{
		"edge/admin/app/b1":      `{"v":1,"state":"disabled",` + at + `,"by":"` + strings.Repeat("x", 100<<10) + `"}`,
		"edge/admin/app/ghost":   `{"v":1,"state":"disabled",` + at + `}`,
		"edge/admin/nopool/b1":   `{"v":1,"state":"disabled",` + at + `}`,
		"edge/admin/app/b1%2Fx":  `{"v":1,"state":"disabled","weight":2000000,` + at + `}`,
		"edge/admin/app/%62%31":  `{"v":1,"state":"disabled",` + at + `}`,
		"edge/admin/app/b1/more": `{"v":1,"state":"disabled",` + at + `}`,
		"edge/admin/app/b2":      `{"v":9,"state":"ready",` + at + `}`,
	}
	for k, v := range hostile {
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Await(t, 10*time.Second, "every hostile entry refused or held", func() (bool, string) {
		st := e.f.Status()
		return st.Refused == 5 && len(st.Actions) == 3, fmt.Sprintf("refused %d: %v; actions %+v", st.Refused, st.Errors, st.Actions)
	})
	if got := e.target.state("b1"); got != "ready/1" {
		t.Errorf("b1 is %s, want ready/1: no hostile entry may change it", got)
	}
	if got := e.target.state("b2"); got != "drain/1" {
		t.Errorf("b2 is %s, want drain/1: a garbage overwrite keeps the last valid action", got)
	}
	if got := e.target.state("ghost"); got != "absent" {
		t.Errorf("ghost is %s: an action never makes a member", got)
	}
	log := e.log.String()
	for _, want := range []string{"more than 1024", "weight 2000000 out of range", "version 9", "not path-escaped", "want edge/admin/<pool>/<backend>", "names no backend of this edge"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "fleet action refused"); n != 5 {
		t.Errorf("%d refusal lines, want one for each of the 5 refused entries:\n%s", n, log)
	}
	if got := e.target.drained(); len(got) != 1 {
		t.Errorf("drains %v: a refused entry must not drain again", got)
	}
}

// putFleetKeys writes n entries edge/admin/app/nNNNN of value "x".
func putFleetKeys(t *testing.T, c *api.Client, n int) {
	t.Helper()
	var ops api.TxnOps
	for i := range n {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: fmt.Sprintf("edge/admin/app/n%04d", i), Value: []byte("x")}})
	}
	for len(ops) > 0 {
		n := min(len(ops), 64) // Consul's bound on one transaction
		if ok, resp, _, err := c.Txn().Txn(ops[:n], nil); err != nil || !ok {
			t.Fatalf("txn: %v %v", err, resp)
		}
		ops = ops[n:]
	}
}

// TestFleetActionsBoundedAnswer: an entry larger than the client's bound,
// and the keys past MaxActions, are refused one by one: the valid
// actions stay in force on a running edge and are applied by a starting
// one, and an edge that starts while Consul does not answer applies the
// last set it read, from its state_dir.
func TestFleetActionsBoundedAnswer(t *testing.T) {
	agent := consultest.Start(t)
	small, err := consul.NewClient(consul.ClientOptions{Address: agent.Addr, MaxResponseBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestFleetActions(t, small, "e", newFleetTarget(t, "b1"))
	if _, _, err := e.f.Act(context.Background(), "app", "b1", func(x *Action) { x.State = balance.AdminDisabled }); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: "edge/admin/app/big", Value: make([]byte, 8<<10)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.f.Load(context.Background()); err != nil {
		t.Fatalf("Load with one entry over the bound: %v", err)
	}
	if st := e.f.Status(); st.Refused != 1 || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "edge/admin/app/big") || len(st.Actions) != 1 {
		t.Errorf("status with a large entry: %+v", st)
	}
	if got := e.target.state("b1"); got != "disabled/1" {
		t.Errorf("b1 is %s, want the valid action kept beside a large entry", got)
	}

	putFleetKeys(t, agent.Client, MaxActions+1)
	dir := t.TempDir()
	big := newTestFleetActions(t, boundedClient(t, agent.Addr), "f", newFleetTarget(t, "b1"))
	big.f.opts.StateDir = dir
	if err := big.f.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 1,027 keys: b1 first (a backend of this edge), then 1,023 of the
	// others fetched and refused, the last 3 ignored as excess.
	if st := big.f.Status(); st.Excess != 3 || st.Refused != MaxActions-1+3 || len(st.Actions) != 1 {
		t.Errorf("status after %d entries: excess %d refused %d actions %+v", MaxActions+3, st.Excess, st.Refused, st.Actions)
	}
	if got := big.target.state("b1"); got != "disabled/1" {
		t.Errorf("b1 is %s: the valid action must apply beside keys past the bound", got)
	}

	// A restart while Consul does not answer: the state file's set.
	dead, err := consul.NewClient(consul.ClientOptions{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	again := newTestFleetActions(t, dead, "f", newFleetTarget(t, "b1"))
	again.f.opts.StateDir = dir
	if err := again.f.Load(context.Background()); err == nil {
		t.Fatal("Load from a dead address succeeded")
	}
	if got := again.target.state("b1"); got != "disabled/1" {
		t.Errorf("b1 is %s after a restart without consul, want the saved action", got)
	}
}

// TestFleetActionsReachMembersBeforeTheyJoin: an action on a backend this
// edge does not have yet is set on its pool, so the snapshot that adds a
// member of that ID (a reload, discovery) already has it drained; and a
// pool a reload builds, with its name's fleet layer, starts with them.
func TestFleetActionsReachMembersBeforeTheyJoin(t *testing.T) {
	agent := consultest.Start(t)
	v, err := EncodeAction(Action{Pool: "app", Backend: "b2", State: balance.AdminDrain,
		Window: time.Second, DrainAt: time.Now(), At: time.Now(), By: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: ActionKey("edge", "app", "b2"), Value: v}, nil); err != nil {
		t.Fatal(err)
	}
	e := newTestFleetActions(t, boundedClient(t, agent.Addr), "e", newFleetTarget(t, "b1"))
	if err := e.f.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.f.Status(); len(st.Actions) != 1 || st.Actions[0].Applied {
		t.Errorf("status before b2 joins: %+v, want the action not applied", st.Actions)
	}
	pool := e.target.Pool("app")
	if err := pool.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1"}, {ID: "b2", Addr: "127.0.0.1:2"}}); err != nil {
		t.Fatal(err)
	}
	if got := e.target.state("b2"); got != "drain/1" {
		t.Errorf("b2 in the snapshot that adds it is %s, want drain/1", got)
	}
	if st := e.f.Status(); len(st.Actions) != 1 || !st.Actions[0].Applied {
		t.Errorf("status after b2 joined: %+v, want the action applied", st.Actions)
	}

	rebuilt, err := balance.NewPool(balance.PoolOptions{Name: "app", Fleet: e.f.Layer("app")})
	if err != nil {
		t.Fatal(err)
	}
	if err := rebuilt.Update([]balance.Member{{ID: "b2", Addr: "127.0.0.1:2"}}); err != nil {
		t.Fatal(err)
	}
	if b := rebuilt.Snapshot().ByID("b2"); b == nil || b.AdminState() != balance.AdminDrain {
		t.Errorf("b2 in a pool built with the fleet's layer: %v, want drained", b)
	}
	if got := e.target.drained(); len(got) != 0 {
		t.Errorf("drains %v: a backend without connections here has none to close", got)
	}
}

// TestLocalDrainSurvivesFleetEnable: the local operator's drain of a
// backend and the fleet's are settings of their own, so enabling the
// backend at fleet scope clears the fleet's drain and leaves this edge's
// own drain in force.
func TestLocalDrainSurvivesFleetEnable(t *testing.T) {
	agent := consultest.Start(t)
	e := newTestFleetActions(t, boundedClient(t, agent.Addr), "e", newFleetTarget(t, "b1", "b2"))
	pool := e.target.Pool("app")
	if _, err := pool.SetAdminState("b1", balance.AdminDrain); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := e.f.Act(ctx, "app", "b1", func(x *Action) { x.State = balance.AdminDrain; x.Window = time.Second }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.f.Act(ctx, "app", "b1", func(x *Action) { x.State = balance.AdminReady }); err != nil {
		t.Fatal(err)
	}
	if got := e.target.state("b1"); got != "drain/1" {
		t.Fatalf("b1 after the fleet's enable is %s, want drain/1: the local drain stays", got)
	}
	if b := pool.Snapshot().ByID("b1"); b.Available() {
		t.Errorf("b1 pickable after the fleet's enable; the local drain must keep it out")
	}
}

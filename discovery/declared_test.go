package discovery

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// fakePool is a DeclaredPool whose Run reports that it runs and ends.
type fakePool struct {
	decl    RouteDecl
	running chan struct{} // closed when Run started
	ended   chan struct{} // closed when Run returned
}

func (p *fakePool) Run(ctx context.Context) {
	close(p.running)
	<-ctx.Done()
	close(p.ended)
}

// fakeHost is a PoolHost that records what DeclaredPools asks of it.
type fakeHost struct {
	mu      sync.Mutex
	policy  RoutePolicy
	fail    map[string]bool // services whose pool cannot be built
	built   []*fakePool
	removed []*fakePool
	changes int
	// events, when set, gets "built svc" and "removed svc" as they happen.
	events chan string
}

func (h *fakeHost) event(what string, p *fakePool) {
	if h.events != nil {
		h.events <- what + " " + p.decl.Service
	}
}

func (h *fakeHost) Policy() RoutePolicy {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.policy
}

func (h *fakeHost) setPolicy(p RoutePolicy) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.policy = p
}

func (h *fakeHost) NewPool(dc RouteDecl) (*fakePool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail[dc.Service] {
		return nil, errors.New("cannot build")
	}
	p := &fakePool{decl: dc, running: make(chan struct{}), ended: make(chan struct{})}
	h.built = append(h.built, p)
	h.event("built", p)
	return p, nil
}

func (h *fakeHost) Removed(p *fakePool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removed = append(h.removed, p)
	h.event("removed", p)
}

func (h *fakeHost) Changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes++
}

func (h *fakeHost) snapshot() (built, removed []*fakePool, changes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*fakePool(nil), h.built...), append([]*fakePool(nil), h.removed...), h.changes
}

// syncLog is a log destination the pools' goroutines may write to.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startDeclared runs a DeclaredPools over host until the test ends, and
// returns it once it follows changes.
func startDeclared(t *testing.T, host *fakeHost) (*DeclaredPools[*fakePool], *syncLog) {
	t.Helper()
	logs := &syncLog{}
	d := NewDeclaredPools(DeclaredPoolsOptions[*fakePool]{Host: host, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	<-d.Started()
	return d, logs
}

func admittedKeys(as []Admitted[*fakePool]) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Decl.Service+"="+a.Decl.Key())
	}
	return out
}

var anyHost = RoutePolicy{AllowAnyHost: true}

// TestDeclaredPoolsStartKeepStop: an admitted declaration gets a running
// pool; a change of its routes alone keeps the pool; a change of its pool
// settings builds a new one and stops the old; a declaration that goes
// away has its pool stopped and removed.
func TestDeclaredPoolsStartKeepStop(t *testing.T) {
	host := &fakeHost{policy: anyHost}
	d, _ := startDeclared(t, host)

	d.SetDeclared([]RouteDecl{{Service: "chat", PathPrefix: "/chat"}})
	built, _, changes := host.snapshot()
	if len(built) != 1 || changes == 0 {
		t.Fatalf("after the first declaration: %d pools built, %d changes; want 1 and at least 1", len(built), changes)
	}
	first := built[0]
	<-first.running
	if got := admittedKeys(d.Admitted(anyHost)); strings.Join(got, " ") != "chat=/chat" {
		t.Fatalf("admitted %v, want chat=/chat", got)
	}

	// Only the route changes: same pool, new route.
	d.SetDeclared([]RouteDecl{{Service: "chat", PathPrefix: "/ws"}})
	if built, _, _ := host.snapshot(); len(built) != 1 {
		t.Fatalf("a route change built %d pools, want the one kept", len(built))
	}
	if got := admittedKeys(d.Admitted(anyHost)); strings.Join(got, " ") != "chat=/ws" {
		t.Fatalf("admitted %v, want chat=/ws", got)
	}
	if ps := d.Pools(); len(ps) != 1 || ps[0] != first {
		t.Fatalf("pools %v, want the first one kept", ps)
	}

	// A pool setting changes: the old pool ends before the new one runs.
	d.SetDeclared([]RouteDecl{{Service: "chat", PathPrefix: "/ws", MaxConns: 10}})
	built, removed, _ := host.snapshot()
	if len(built) != 2 || len(removed) != 1 || removed[0] != first {
		t.Fatalf("after a pool change: %d built, removed %v; want 2 built and the first removed", len(built), removed)
	}
	<-first.ended
	second := built[1]
	<-second.running
	if a := d.Admitted(anyHost); len(a) != 1 || a[0].Pool != second {
		t.Fatalf("admitted %v, want the new pool", admittedKeys(a))
	}

	// The declaration goes away.
	d.SetDeclared(nil)
	if _, removed, _ := host.snapshot(); len(removed) != 2 || removed[1] != second {
		t.Fatalf("removed %v, want the second pool too", removed)
	}
	<-second.ended
	if ps := d.Pools(); len(ps) != 0 {
		t.Fatalf("pools %v after the declaration went away, want none", ps)
	}
}

// TestDeclaredPoolsPolicy: what the policy refuses gets no pool and is
// logged once however often the registry repeats it; a new policy (a
// reload) that refuses a running pool's declaration stops that pool.
func TestDeclaredPoolsPolicy(t *testing.T) {
	host := &fakeHost{policy: RoutePolicy{AllowedHosts: []string{"*.apps.test"}}}
	d, logs := startDeclared(t, host)
	decls := []RouteDecl{
		{Service: "ok", Hosts: []string{"ok.apps.test"}, PathPrefix: "/"},
		{Service: "evil", Hosts: []string{"bank.test"}, PathPrefix: "/"},
	}
	for range 3 {
		d.SetDeclared(decls)
	}
	if got := admittedKeys(d.Admitted(host.Policy())); strings.Join(got, " ") != "ok=ok.apps.test/" {
		t.Fatalf("admitted %v, want only ok", got)
	}
	if r := d.Refused(); len(r) != 1 || r[0].Service != "evil" {
		t.Fatalf("refused %v, want evil", r)
	}
	if n := strings.Count(logs.String(), `msg="declared route refused" service=evil`); n != 1 {
		t.Fatalf("refusal logged %d times, want once:\n%s", n, logs)
	}
	if built, _, _ := host.snapshot(); len(built) != 1 || built[0].decl.Service != "ok" {
		t.Fatalf("built %v, want only ok's pool", built)
	}

	// The file stops allowing the host.
	host.setPolicy(RoutePolicy{})
	d.Reconcile()
	if _, removed, _ := host.snapshot(); len(removed) != 1 || removed[0].decl.Service != "ok" {
		t.Fatalf("removed %v, want ok's pool after the policy refused it", removed)
	}
	if ps := d.Pools(); len(ps) != 0 {
		t.Fatalf("pools %v, want none", ps)
	}
	if n := strings.Count(logs.String(), `msg="declared route refused" service=ok`); n != 1 {
		t.Fatalf("the new refusal logged %d times, want once:\n%s", n, logs)
	}
}

// TestDeclaredPoolsBuildFailure: a declaration whose pool cannot be built
// is logged and left out; the others still get theirs.
func TestDeclaredPoolsBuildFailure(t *testing.T) {
	host := &fakeHost{policy: anyHost, fail: map[string]bool{"bad": true}}
	d, logs := startDeclared(t, host)
	d.SetDeclared([]RouteDecl{{Service: "bad", PathPrefix: "/bad"}, {Service: "good", PathPrefix: "/good"}})
	if got := admittedKeys(d.Admitted(anyHost)); strings.Join(got, " ") != "good=/good" {
		t.Fatalf("admitted with a pool %v, want only good", got)
	}
	if !strings.Contains(logs.String(), `msg="declared route ignored" service=bad`) {
		t.Fatalf("no log line for the pool that could not be built:\n%s", logs)
	}
}

// TestDeclaredPoolsRun: nothing starts before Run; Run starts what was
// declared before it, and returns only once every pool's Run returned.
func TestDeclaredPoolsRun(t *testing.T) {
	host := &fakeHost{policy: anyHost}
	d := NewDeclaredPools(DeclaredPoolsOptions[*fakePool]{Host: host, Logger: slog.New(slog.DiscardHandler)})
	d.SetDeclared([]RouteDecl{{Service: "a", PathPrefix: "/a"}, {Service: "b", PathPrefix: "/b"}})
	if built, _, _ := host.snapshot(); len(built) != 0 {
		t.Fatalf("%d pools built before Run, want none", len(built))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	<-d.Started()
	// Run's own reconcile may still be under way: Reconcile waits for it.
	d.Reconcile()
	built, _, _ := host.snapshot()
	if len(built) != 2 {
		t.Fatalf("%d pools built after Run, want 2", len(built))
	}
	for _, p := range built {
		<-p.running
	}
	cancel()
	<-done
	for _, p := range built {
		select {
		case <-p.ended:
		default:
			t.Fatalf("Run returned while pool %s still ran", p.decl.Service)
		}
	}
	// After Run, nothing starts again.
	d.SetDeclared([]RouteDecl{{Service: "c", PathPrefix: "/c"}})
	if built, _, _ := host.snapshot(); len(built) != 2 {
		t.Fatalf("%d pools built after Run ended, want still 2", len(built))
	}
}

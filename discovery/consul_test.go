package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// node is the node name consultest gives its agent; member IDs are node/id.
const node = "consultest"

// awaitTimeout bounds every wait for an event from a real Consul.
const awaitTimeout = 30 * time.Second

type update struct {
	members int
	at      time.Time
}

// recorder is an Observer that turns events into channels tests can await.
type recorder struct {
	updates chan update
	errs    chan error
}

func newRecorder() *recorder {
	return &recorder{updates: make(chan update, 1000), errs: make(chan error, 1000)}
}

func (r *recorder) Updated(_ string, n int) {
	select {
	case r.updates <- update{n, time.Now()}:
	default:
	}
}

func (r *recorder) Error(_ string, err error) {
	select {
	case r.errs <- err:
	default:
	}
}

var _ Observer = (*recorder)(nil)

func ids(p *balance.Pool) []string {
	var out []string
	for _, b := range p.Snapshot().Backends {
		out = append(out, b.ID())
	}
	return out
}

func want(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, node+"/"+n)
	}
	return out
}

// awaitMembers waits for updates until the pool holds exactly wantIDs and
// returns when the matching update was published.
func awaitMembers(t *testing.T, rec *recorder, p *balance.Pool, wantIDs []string) time.Time {
	t.Helper()
	timeout := time.After(awaitTimeout)
	for {
		if got := ids(p); reflect.DeepEqual(got, wantIDs) {
			return time.Now()
		}
		select {
		case u := <-rec.updates:
			if got := ids(p); reflect.DeepEqual(got, wantIDs) {
				return u.at
			}
		case <-timeout:
			t.Fatalf("pool members: got %v, want %v", ids(p), wantIDs)
		}
	}
}

func awaitError(t *testing.T, rec *recorder) error {
	t.Helper()
	select {
	case err := <-rec.errs:
		return err
	case <-time.After(awaitTimeout):
		t.Fatal("no error reported")
		return nil
	}
}

type fixture struct {
	agent *consultest.Agent
	pool  *balance.Pool
	rec   *recorder
	w     *Watcher
	stop  func()
}

func startWatcher(t *testing.T, agent *consultest.Agent, opts WatcherOptions) *fixture {
	t.Helper()
	pool, err := balance.NewPool(balance.PoolOptions{Name: opts.Pool})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	opts.Target, opts.Client, opts.Observer = pool, agent.Client, rec
	if opts.WaitTime == 0 {
		opts.WaitTime = 2 * time.Second
	}
	opts.MinBackoff, opts.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	if testing.Verbose() {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w, err := NewWatcher(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: got %v, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return &fixture{agent: agent, pool: pool, rec: rec, w: w, stop: stop}
}

func register(t *testing.T, c *api.Client, id, service string, port int, tags []string, ttl bool) {
	t.Helper()
	reg := &api.AgentServiceRegistration{ID: id, Name: service, Address: "127.0.0.1", Port: port, Tags: tags}
	if ttl {
		reg.Check = &api.AgentServiceCheck{CheckID: "ttl:" + id, TTL: "1h", Status: api.HealthPassing}
	}
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

func deregister(t *testing.T, c *api.Client, id string) {
	t.Helper()
	if err := c.Agent().ServiceDeregister(id); err != nil {
		t.Fatalf("deregister %s: %v", id, err)
	}
}

// TestWatcherFollowsConsul walks one pool through the life of its instances
// and reports how long each change takes to reach the pool.
func TestWatcherFollowsConsul(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	register(t, c, "chat-a", "chat", 9001, nil, true)
	register(t, c, "chat-b", "chat", 9002, nil, true)
	f := startWatcher(t, agent, WatcherOptions{Pool: "chat", Service: "chat"})
	awaitMembers(t, f.rec, f.pool, want("chat-a", "chat-b"))

	var reactions []string
	step := func(what string, do func(), wantIDs []string) {
		t.Helper()
		start := time.Now()
		do()
		at := awaitMembers(t, f.rec, f.pool, wantIDs)
		reactions = append(reactions, what+" "+at.Sub(start).Round(100*time.Microsecond).String())
	}
	step("register", func() { register(t, c, "chat-c", "chat", 9003, nil, true) }, want("chat-a", "chat-b", "chat-c"))
	step("critical", func() {
		if err := c.Agent().FailTTL("ttl:chat-c", "down"); err != nil {
			t.Fatal(err)
		}
	}, want("chat-a", "chat-b"))
	step("passing", func() {
		if err := c.Agent().PassTTL("ttl:chat-c", "up"); err != nil {
			t.Fatal(err)
		}
	}, want("chat-a", "chat-b", "chat-c"))
	step("maintenance", func() {
		if err := c.Agent().EnableServiceMaintenance("chat-b", "deploy"); err != nil {
			t.Fatal(err)
		}
	}, want("chat-a", "chat-c"))
	step("maintenance off", func() {
		if err := c.Agent().DisableServiceMaintenance("chat-b"); err != nil {
			t.Fatal(err)
		}
	}, want("chat-a", "chat-b", "chat-c"))
	step("deregister", func() { deregister(t, c, "chat-c") }, want("chat-a", "chat-b"))
	t.Logf("reaction times (Consul API call to pool update): %s", strings.Join(reactions, ", "))

	st := f.w.Status()
	if st.Source != SourceConsul || st.Members != 2 || st.LastIndex == 0 || st.LastError != "" || st.Panic {
		t.Errorf("status: got %+v, want source consul, 2 members, an index, no error, no panic", st)
	}
	if b := f.pool.Snapshot().Backends[0]; b.Addr() != "127.0.0.1:9001" {
		t.Errorf("address: got %q, want 127.0.0.1:9001", b.Addr())
	}
}

func TestWatcherTagFilter(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	register(t, c, "x", "web", 9001, []string{"blue"}, false)
	register(t, c, "y", "web", 9002, []string{"green"}, false)
	f := startWatcher(t, agent, WatcherOptions{Pool: "web-blue", Service: "web", Tag: "blue"})
	awaitMembers(t, f.rec, f.pool, want("x"))
	register(t, c, "y", "web", 9002, []string{"green", "blue"}, false)
	awaitMembers(t, f.rec, f.pool, want("x", "y"))
	register(t, c, "x", "web", 9001, []string{"green"}, false)
	awaitMembers(t, f.rec, f.pool, want("y"))
}

// TestWatcherConsulDownAndRestart kills Consul under a live pool: the pool
// keeps its members while Consul is gone and the watcher recovers after a
// restart. Then Consul comes back with no state at all (empty catalog, a
// lower index): the index is reset and the empty answer is held back by the
// panic threshold until the instances are registered again.
func TestWatcherConsulDownAndRestart(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	register(t, c, "a", "chat", 9001, nil, false)
	register(t, c, "b", "chat", 9002, nil, false)
	register(t, c, "c", "chat", 9003, nil, false)
	f := startWatcher(t, agent, WatcherOptions{Pool: "chat", Service: "chat", PanicHold: time.Hour})
	awaitMembers(t, f.rec, f.pool, want("a", "b", "c"))

	agent.Stop()
	err := awaitError(t, f.rec)
	if got := ids(f.pool); !reflect.DeepEqual(got, want("a", "b", "c")) {
		t.Fatalf("members while Consul is down: got %v, want all three", got)
	}
	st := f.w.Status()
	if st.LastError == "" || st.Errors < 1 || st.Staleness <= 0 || st.Members != 3 {
		t.Errorf("status while down: got %+v, want an error, staleness, 3 members", st)
	}
	t.Logf("while down: %v", err)

	// Restart with its data: the agent restores its services; the watcher
	// reconnects (after backoff) and follows changes again.
	agent.Restart()
	register(t, c, "d", "chat", 9004, nil, false)
	awaitMembers(t, f.rec, f.pool, want("a", "b", "c", "d"))
	if st := f.w.Status(); st.LastError != "" || st.Errors != 0 {
		t.Errorf("status after restart: got error %q (%d), want none", st.LastError, st.Errors)
	}

	// Push the index up so that a Consul without state answers lower.
	for i := range 20 {
		register(t, c, "d", "chat", 9004, []string{fmt.Sprint("v", i)}, false)
	}
	for deadline := time.Now().Add(awaitTimeout); f.w.Status().LastIndex < 30; {
		if time.Now().After(deadline) {
			t.Fatalf("status after 20 registrations: got %+v, want index 30 at least", f.w.Status())
		}
		select {
		case <-f.rec.updates: // tag changes publish nothing; the index moves
		case <-time.After(50 * time.Millisecond):
		}
	}
	before := f.w.Status()

	restarted := time.Now()
	agent.RestartEmpty()
	deadline := time.Now().Add(awaitTimeout)
	for st = f.w.Status(); !st.Panic; st = f.w.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("status after an empty restart: got %+v, want panic (empty answer held)", st)
		}
		time.Sleep(20 * time.Millisecond) // entering panic publishes nothing new to await
	}
	if got := ids(f.pool); !reflect.DeepEqual(got, want("a", "b", "c", "d")) {
		t.Fatalf("members after an empty restart: got %v, want all four", got)
	}
	if st.LastIndex >= before.LastIndex || st.PanicHeld != 4 || st.LastError != "" {
		t.Errorf("status after an empty restart: got index %d (was %d), held %d, error %q; want a lower index, 4 held, no error",
			st.LastIndex, before.LastIndex, st.PanicHeld, st.LastError)
	}
	t.Logf("index %d before the empty restart, %d after; empty answer held %v after the restart began",
		before.LastIndex, st.LastIndex, time.Since(restarted).Round(time.Millisecond))

	// The instances come back (their agents re-sync): the watcher follows.
	register(t, c, "a", "chat", 9001, nil, false)
	register(t, c, "b", "chat", 9002, nil, false)
	register(t, c, "e", "chat", 9005, nil, false)
	awaitMembers(t, f.rec, f.pool, want("a", "b", "e"))
	if st := f.w.Status(); st.Panic {
		t.Errorf("status: got panic after recovery, want none")
	}
}

func TestWatcherColdStartFromPersisted(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	dir := t.TempDir()
	register(t, agent.Client, "a", "chat", 9001, nil, false)
	register(t, agent.Client, "b", "chat", 9002, nil, false)
	first := startWatcher(t, agent, WatcherOptions{Pool: "chat", Service: "chat", StateDir: dir})
	awaitMembers(t, first.rec, first.pool, want("a", "b"))
	first.stop()
	agent.Stop()

	// A fresh edge while Consul is down.
	second := startWatcher(t, agent, WatcherOptions{Pool: "chat", Service: "chat", StateDir: dir})
	awaitMembers(t, second.rec, second.pool, want("a", "b"))
	awaitError(t, second.rec)
	st := second.w.Status()
	if st.Source != SourcePersisted || st.Members != 2 || st.LastError == "" || st.LastContact.IsZero() {
		t.Errorf("status: got %+v, want source persisted, 2 members, an error, the save time", st)
	}
	if got := ids(second.pool); !reflect.DeepEqual(got, want("a", "b")) {
		t.Errorf("members: got %v, want a and b", got)
	}
}

// TestWatcherPanicThreshold drops three of four instances in one Raft index
// (a node deregistered as a whole): the pool keeps them for PanicHold, then
// believes Consul.
func TestWatcherPanicThreshold(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	register(t, c, "a", "chat", 9001, nil, false)
	for _, id := range []string{"b", "c", "d"} {
		_, err := c.Catalog().Register(&api.CatalogRegistration{
			Node: "n2", Address: "127.0.0.2",
			Service: &api.AgentService{ID: id, Service: "chat", Port: 9000},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	hold := 2 * time.Second
	f := startWatcher(t, agent, WatcherOptions{Pool: "chat", Service: "chat", PanicHold: hold})
	all := []string{node + "/a", "n2/b", "n2/c", "n2/d"}
	awaitMembers(t, f.rec, f.pool, all)

	if _, err := c.Catalog().Deregister(&api.CatalogDeregistration{Node: "n2"}, nil); err != nil {
		t.Fatal(err)
	}
	dropped := time.Now()
	deadline := time.Now().Add(awaitTimeout)
	for st := f.w.Status(); !st.Panic; st = f.w.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("status: got %+v, want panic", st)
		}
		time.Sleep(20 * time.Millisecond) // entering panic publishes nothing new to await
	}
	if got := ids(f.pool); !reflect.DeepEqual(got, all) {
		t.Fatalf("members in panic: got %v, want all four kept", got)
	}
	if st := f.w.Status(); st.PanicHeld != 3 {
		t.Errorf("held: got %d, want 3", st.PanicHeld)
	}
	at := awaitMembers(t, f.rec, f.pool, want("a"))
	// The status may follow the members it published a moment later.
	deadline = time.Now().Add(awaitTimeout)
	for st := f.w.Status(); st.Panic; st = f.w.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("status after hold: got %+v, want no panic", st)
		}
		time.Sleep(20 * time.Millisecond) // leaving panic publishes nothing more to await
	}
	t.Logf("shrunken answer believed %v after the drop (hold %v)", at.Sub(dropped).Round(time.Millisecond), hold)
}

func TestRouteWatcher(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	register(t, c, "chat-1", "chat", 9001, []string{"edge.host=chat.example.com", "edge.path=/ws", "edge.sticky=cookie"}, false)
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "api-1", Name: "api", Port: 9002,
		Tags: []string{"edge"}, Meta: map[string]string{"edge-route-path": "/api", "edge-route-max-conns": "50"}}); err != nil {
		t.Fatal(err)
	}
	register(t, c, "bad-1", "bad", 9003, []string{"edge.hots=x.example.com"}, false)
	register(t, c, "plain-1", "plain", 9004, []string{"v1"}, false)

	routes := make(chan []RouteDecl, 100)
	rw, err := NewRouteWatcher(RouteWatcherOptions{Client: c, WaitTime: 2 * time.Second, OnChange: func(r []RouteDecl) { routes <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rw.Run(ctx) }()
	defer func() { cancel(); <-done }()

	await := func(wantRoutes []RouteDecl) {
		t.Helper()
		timeout := time.After(awaitTimeout)
		var got []RouteDecl
		for {
			select {
			case got = <-routes:
				// Registered is the catalog's CreateIndex: set, but
				// not predictable.
				for i := range got {
					if got[i].Registered == 0 {
						t.Fatalf("route %+v without its registration index", got[i])
					}
					got[i].Registered = 0
				}
				if reflect.DeepEqual(got, wantRoutes) {
					return
				}
			case <-timeout:
				t.Fatalf("routes: got %+v, want %+v", got, wantRoutes)
			}
		}
	}
	apiRoute := RouteDecl{Service: "api", PathPrefix: "/api", MaxConns: 50}
	chatRoute := RouteDecl{Service: "chat", Hosts: []string{"chat.example.com"}, PathPrefix: "/ws", Sticky: balance.Cookie.String()}
	await([]RouteDecl{apiRoute, chatRoute})
	if st := rw.Status(); len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], `"bad"`) || st.Routes != 2 {
		t.Errorf("status: got %+v, want 2 routes and one warning about bad", st)
	}

	// A declaration turning malformed keeps the previous valid one.
	register(t, c, "chat-1", "chat", 9001, []string{"edge.host=chat.example.com", "edge.path=ws"}, false)
	register(t, c, "chat-1", "chat", 9001, []string{"edge.host=chat.example.com", "edge.path=/socket"}, false)
	chatRoute.PathPrefix, chatRoute.Sticky = "/socket", ""
	await([]RouteDecl{apiRoute, chatRoute})

	deregister(t, c, "api-1")
	await([]RouteDecl{chatRoute})
}

func TestRegister(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
		}
	}))
	defer ready.Close()

	ctx := context.Background()
	dereg, err := Register(ctx, agent.Client, RegisterOptions{
		Service: "edge", ID: "edge-1", Port: 8443, Tags: []string{"lb"},
		CheckURL: ready.URL + "/readyz", Interval: time.Second, Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Wait (blocking queries) until the instance is passing its check.
	var index uint64
	deadline := time.Now().Add(awaitTimeout)
	for {
		entries, meta, err := agent.Client.Health().Service("edge", "", true, &api.QueryOptions{WaitIndex: index, WaitTime: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		index = meta.LastIndex
		if len(entries) == 1 {
			e := entries[0]
			if e.Service.ID != "edge-1" || e.Service.Port != 8443 || len(e.Checks) != 2 {
				t.Errorf("entry: got %+v with %d checks, want edge-1:8443 with serfHealth and readyz", e.Service, len(e.Checks))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("edge never became passing")
		}
	}
	if err := dereg(ctx); err != nil {
		t.Fatal(err)
	}
	services, err := agent.Client.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := services["edge-1"]; ok {
		t.Errorf("after deregister: edge-1 still registered")
	}
	if _, err := Register(ctx, agent.Client, RegisterOptions{Service: "edge"}); err == nil {
		t.Errorf("register without port: got nil error")
	}
}

// membersTarget keeps the last member list a watcher published.
type membersTarget struct {
	mu   sync.Mutex
	last []balance.Member
	ch   chan struct{}
}

func newMembersTarget() *membersTarget { return &membersTarget{ch: make(chan struct{}, 100)} }

func (m *membersTarget) Update(ms []balance.Member) error {
	m.mu.Lock()
	m.last = append([]balance.Member(nil), ms...)
	m.mu.Unlock()
	select {
	case m.ch <- struct{}{}:
	default:
	}
	return nil
}

// await waits until ok holds for the published list, and returns it.
func (m *membersTarget) await(t *testing.T, what string, ok func([]balance.Member) bool) []balance.Member {
	t.Helper()
	timeout := time.After(awaitTimeout)
	for {
		m.mu.Lock()
		last := m.last
		m.mu.Unlock()
		if ok(last) {
			return last
		}
		select {
		case <-m.ch:
		case <-timeout:
			t.Fatalf("%s: last published %+v", what, last)
		}
	}
}

func runWatcher(t *testing.T, opts WatcherOptions) {
	t.Helper()
	opts.MinBackoff, opts.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	w, err := NewWatcher(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func since(ms []balance.Member, id string) (time.Time, bool) {
	for _, m := range ms {
		if m.ID == node+"/"+id {
			return m.Since, true
		}
	}
	return time.Time{}, false
}

// TestWatcherJoinTime: a member that appears in an answer after the first
// carries the time that answer arrived, on every watcher of the service
// (the edges of a fleet); members of the first answer carry none; one that
// comes back after a failing check gets a new time; a restart from the
// state directory keeps the time.
func TestWatcherJoinTime(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	register(t, c, "a", "chat", 9001, nil, true)
	register(t, c, "b", "chat", 9002, nil, true)
	// Both in the catalog, passing, before any watcher asks: they are
	// members from the start.
	testkit.WaitFor(t, "a and b passing in the catalog", func() bool {
		es, _, err := c.Health().Service("chat", "", true, nil)
		return err == nil && len(es) == 2
	})
	dir := t.TempDir()
	targets := []*membersTarget{newMembersTarget(), newMembersTarget()}
	for i, tg := range targets {
		o := WatcherOptions{Pool: "chat", Service: "chat", Target: tg, Client: c, WaitTime: 5 * time.Second}
		if i == 0 {
			o.StateDir = dir
		}
		runWatcher(t, o)
	}
	has := func(names ...string) func([]balance.Member) bool {
		return func(ms []balance.Member) bool {
			if len(ms) != len(names) {
				return false
			}
			for _, n := range names {
				if _, ok := since(ms, n); !ok {
					return false
				}
			}
			return true
		}
	}
	for _, tg := range targets {
		for _, m := range tg.await(t, "first answer", has("a", "b")) {
			if !m.Since.IsZero() {
				t.Fatalf("member %s of the first answer carries a join time %v; want none", m.ID, m.Since)
			}
		}
	}

	before := time.Now()
	register(t, c, "c", "chat", 9003, nil, true)
	var joined []time.Time
	for _, tg := range targets {
		ms := tg.await(t, "c joins", has("a", "b", "c"))
		after := time.Now()
		s, _ := since(ms, "c")
		if s.Before(before) || s.After(after) {
			t.Fatalf("join time of c: %v, want between the registration (%v) and its arrival (%v)", s, before, after)
		}
		joined = append(joined, s)
		if a, _ := since(ms, "a"); !a.IsZero() {
			t.Fatalf("member a gained a join time %v", a)
		}
	}
	t.Logf("join times of c on the two watchers differ by %v", joined[1].Sub(joined[0]).Abs())

	// A failing check takes c out; passing again, it rejoins later.
	if err := c.Agent().FailTTL("ttl:c", "down"); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		tg.await(t, "c fails", has("a", "b"))
	}
	if err := c.Agent().PassTTL("ttl:c", "up"); err != nil {
		t.Fatal(err)
	}
	for i, tg := range targets {
		ms := tg.await(t, "c passes", has("a", "b", "c"))
		if s, _ := since(ms, "c"); !s.After(joined[i]) {
			t.Fatalf("watcher %d: c back after a failing check has join time %v, want after %v", i, s, joined[i])
		}
	}

	// The same state directory: the restored set, and the first answer
	// after it, keep c's time.
	ms := targets[0].await(t, "c back", has("a", "b", "c"))
	cWas, _ := since(ms, "c")
	// The set is persisted right after it is published.
	testkit.WaitFor(t, "c's join time in the state file", func() bool {
		saved, ok, err := loadSet(statePath(dir, "chat"))
		s, _ := since(saved.Members, "c")
		return err == nil && ok && s.Equal(cWas)
	})
	again := newMembersTarget()
	runWatcher(t, WatcherOptions{Pool: "chat", Service: "chat", Target: again, Client: c, StateDir: dir, WaitTime: 5 * time.Second})
	got := again.await(t, "restart", has("a", "b", "c"))
	if s, _ := since(got, "c"); !s.Equal(cWas) {
		t.Fatalf("after a restart from the state directory: c's join time %v, want %v", s, cWas)
	}
}

// TestDeclaredPoolsFollowConsul: a RouteWatcher on a real agent drives
// DeclaredPools: a service declaring a route gets a pool, declaring other
// pool settings replaces it, and deregistering removes it.
func TestDeclaredPoolsFollowConsul(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	host := &fakeHost{policy: RoutePolicy{AllowedHosts: []string{"chat.example.com"}}, events: make(chan string, 100)}
	d := NewDeclaredPools(DeclaredPoolsOptions[*fakePool]{Host: host, Logger: slog.New(slog.DiscardHandler)})
	rw, err := NewRouteWatcher(RouteWatcherOptions{Client: c, WaitTime: 2 * time.Second, OnChange: d.SetDeclared})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = d.Run(ctx) }()
	go func() { defer wg.Done(); _ = rw.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	await := func(want string) {
		t.Helper()
		select {
		case got := <-host.events:
			if got != want {
				t.Fatalf("event %q, want %q", got, want)
			}
		case <-time.After(awaitTimeout):
			t.Fatalf("no event %q", want)
		}
	}
	register(t, c, "chat-1", "chat", 9001, []string{"edge.host=chat.example.com", "edge.path=/ws"}, false)
	await("built chat")
	d.Reconcile() // waits for the reconcile that built the pool
	if a := d.Admitted(host.Policy()); len(a) != 1 || a[0].Decl.PathPrefix != "/ws" {
		t.Fatalf("admitted %v, want chat on /ws", admittedKeys(a))
	}
	register(t, c, "chat-1", "chat", 9001, []string{"edge.host=chat.example.com", "edge.path=/ws", "edge.max-conns=5"}, false)
	await("removed chat")
	await("built chat")
	deregister(t, c, "chat-1")
	await("removed chat")
	if ps := d.Pools(); len(ps) != 0 {
		t.Fatalf("pools %v after the service left, want none", ps)
	}
}

// TestKeepRegistered: both registrations reach the agent, and both are
// gone once the context ends.
func TestKeepRegistered(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	regs := []RegisterOptions{{Service: "edge", ID: "edge-a", Port: 8443}, {Service: "edge-metrics", ID: "edge-metrics-a", Port: 9100}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		KeepRegistered(ctx, agent.Client, regs, slog.New(slog.DiscardHandler))
	}()
	// Blocking queries on the catalog until both services are listed.
	var index uint64
	deadline := time.After(awaitTimeout)
	for {
		svcs, meta, err := agent.Client.Catalog().Services(&api.QueryOptions{WaitIndex: index, WaitTime: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		index = meta.LastIndex
		if _, ok := svcs["edge"]; ok {
			if _, ok := svcs["edge-metrics"]; ok {
				break
			}
		}
		select {
		case <-deadline:
			t.Fatalf("services %v, want edge and edge-metrics", svcs)
		default:
		}
	}
	cancel()
	<-done
	svcs, err := agent.Client.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"edge-a", "edge-metrics-a"} {
		if _, ok := svcs[id]; ok {
			t.Errorf("%s still registered after the context ended", id)
		}
	}
}

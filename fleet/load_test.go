package fleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// testFleetEdge is one Load with a settable load of backend b1.
type testFleetEdge struct {
	f      *Load
	active atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func startFleetEdge(t *testing.T, agent *consultest.Agent, id string) *testFleetEdge {
	t.Helper()
	return startFleetEdgeWith(t, LoadOptions{Client: boundedClient(t, agent.Addr), ID: id})
}

// startFleetEdgeWith starts the Load of o (Client and ID set) with
// the test's prefix and load, and short timings unless o has a WaitTime.
func startFleetEdgeWith(t *testing.T, o LoadOptions) *testFleetEdge {
	t.Helper()
	e := &testFleetEdge{done: make(chan struct{})}
	o.Prefix = "edge"
	if o.WaitTime == 0 {
		o.PublishEvery, o.WaitTime, o.StaleAfter = 100*time.Millisecond, time.Second, 3*time.Second
	}
	o.Known = func(pool, backend string) bool {
		return pool == "app" && (backend == "" || backend == "b1" || backend == "b2")
	}
	o.Collect = func() Record {
		n := e.active.Load()
		return Record{Ready: true, Connections: n, Pools: []PoolLoad{{Name: "app", Backends: []BackendLoad{{ID: "b1", Active: n}}}}}
	}
	f, err := NewLoad(o)
	if err != nil {
		t.Fatal(err)
	}
	e.f = f
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { defer close(e.done); _ = f.Run(ctx) }()
	t.Cleanup(e.stop)
	return e
}

// boundedClient is a client of the agent at addr made the way edge makes
// its own, by NewClient, so the readers' bounds apply.
func boundedClient(t testing.TB, addr string) *api.Client {
	t.Helper()
	c, err := consul.NewClient(consul.ClientOptions{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *testFleetEdge) stop() {
	e.cancel()
	<-e.done
}

// TestFleetLoadSumsAndLeaves: two edges publish their counts and each
// sums both; a change is published and summed; an edge that stops takes
// its record with it (its session is destroyed), and the other's sum
// drops it.
func TestFleetLoadSumsAndLeaves(t *testing.T) {
	agent := consultest.Start(t)
	a, b := startFleetEdge(t, agent, "a"), startFleetEdge(t, agent, "b")
	a.active.Store(3)
	b.active.Store(4)
	for _, e := range []*testFleetEdge{a, b} {
		testkit.WaitFor(t, "both records summed", func() bool { return e.f.Snapshot().Total("app", "b1") == 7 })
	}
	if st := a.f.Status(); st.Stale || st.Edges != 2 {
		t.Fatalf("status %+v, want fresh with 2 edges", st)
	}
	pair, _, err := agent.Client.KV().Get("edge/edges/a", nil)
	if err != nil || pair == nil || pair.Session == "" {
		t.Fatalf("a's record %+v, %v: want one bound to a session", pair, err)
	}
	b.active.Store(10)
	testkit.WaitFor(t, "a change summed", func() bool { return a.f.Snapshot().Total("app", "b1") == 13 })
	b.stop()
	testkit.WaitFor(t, "a stopped edge leaving the sums", func() bool {
		s := a.f.Snapshot()
		return s.Total("app", "b1") == 3 && len(s.Edges) == 1
	})
}

// TestFleetLoadPublishesOnlyChanges: an edge whose load does not change
// writes nothing but its session renewals.
func TestFleetLoadPublishesOnlyChanges(t *testing.T) {
	agent := consultest.Start(t)
	a := startFleetEdge(t, agent, "a")
	a.active.Store(1)
	testkit.WaitFor(t, "the record", func() bool { return a.f.Snapshot().Total("app", "b1") == 1 })
	_, meta, err := agent.Client.KV().Get("edge/edges/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	// 20 publication rounds without a change: the key's index stays.
	from := a.f.Status().Rounds
	testkit.WaitFor(t, "20 more rounds", func() bool { return a.f.Status().Rounds >= from+20 })
	pair, _, err := agent.Client.KV().Get("edge/edges/a", nil)
	if err != nil || pair == nil {
		t.Fatal(pair, err)
	}
	if pair.ModifyIndex > meta.LastIndex {
		t.Fatalf("unchanged load rewritten: modify index %d after %d", pair.ModifyIndex, meta.LastIndex)
	}
}

// TestFleetLoadHostileRecords: what someone with write access to the
// prefix can put there is refused or cut to what this edge knows: a key no
// session holds, another version, an id under someone else's key, a
// backend that is not in the pool.
func TestFleetLoadHostileRecords(t *testing.T) {
	agent := consultest.Start(t)
	a := startFleetEdge(t, agent, "a")
	kv := agent.Client.KV()
	put := func(key, v string, session bool) {
		t.Helper()
		p := &api.KVPair{Key: key, Value: []byte(v)}
		if !session {
			if _, err := kv.Put(p, nil); err != nil {
				t.Fatal(err)
			}
			return
		}
		// A dev agent that has just started may not have registered its
		// node yet: a session needs one.
		var sid string
		testkit.WaitFor(t, "a session", func() bool {
			id, _, err := agent.Client.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorDelete}, nil)
			sid = id
			return err == nil
		})
		p.Session = sid
		if ok, _, err := kv.Acquire(p, nil); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	rec := func(id, backend string, n int) string {
		return `{"v":1,"id":"` + id + `","ready":true,"connections":1,"pools":[{"name":"app","rate":0,"backends":[{"id":"` + backend + `","active":` + strings.Repeat("9", n) + `}]}],"published":"2026-12-02T00:00:00Z"}`
	}
	put("edge/edges/nosession", rec("nosession", "b1", 3), false)
	put("edge/edges/v2", strings.Replace(rec("v2", "b1", 3), `"v":1`, `"v":2`, 1), true)
	put("edge/edges/spoof", rec("a", "b1", 3), true)
	put("edge/edges/evil", rec("evil", "elsewhere", 3), true)
	put("edge/edges/ok", rec("ok", "b2", 1), true)
	testkit.WaitFor(t, "the good record", func() bool { return a.f.Snapshot().Total("app", "b2") == 9 })
	s := a.f.Snapshot()
	if s.Total("app", "b1") != 0 || s.Refused != 3 {
		t.Fatalf("snapshot %+v: want b1 0 and 3 refused", s)
	}
	if r, ok := s.Edge("evil"); !ok || len(r.Pools[0].Backends) != 0 {
		t.Fatalf("record naming a backend not in the pool: %+v", r)
	}
}

// TestFleetLoadConsulStopped: Consul stopped makes the sums stale at
// once; restarted (empty, as a dev agent comes back), the edges publish
// again under new sessions and the sums converge.
func TestFleetLoadConsulStopped(t *testing.T) {
	agent := consultest.Start(t)
	a, b := startFleetEdge(t, agent, "a"), startFleetEdge(t, agent, "b")
	a.active.Store(2)
	b.active.Store(5)
	testkit.WaitFor(t, "both records", func() bool { return a.f.Snapshot().Total("app", "b1") == 7 && !a.f.Status().Stale })
	agent.Stop()
	testkit.WaitFor(t, "stale while Consul is down", func() bool { return a.f.Status().Stale })
	agent.Restart()
	testkit.WaitFor(t, "fresh sums after Consul returned", func() bool {
		return a.f.Snapshot().Total("app", "b1") == 7 && !a.f.Status().Stale && !b.f.Status().Stale
	})
}

// consulRecorder is a reverse proxy in front of a real agent that records
// every request it passes: what edge asked Consul, to show what it never
// read.
type consulRecorder struct {
	addr string
	mu   sync.Mutex
	reqs []string // "METHOD path?query"
}

func newConsulRecorder(t *testing.T, agentAddr string) *consulRecorder {
	t.Helper()
	rec := &consulRecorder{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: agentAddr})
	rp.ErrorLog = log.New(io.Discard, "", 0) // requests cut short at the end of the test
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		rec.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rec.addr = srv.Listener.Addr().String()
	return rec
}

// count returns how many requests recorded so far match.
func (c *consulRecorder) count(match func(string) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reqs {
		if match(r) {
			n++
		}
	}
	return n
}

// holdKey writes key with v under a new session of agent.
func holdKey(t *testing.T, agent *consultest.Agent, key string, v []byte) {
	t.Helper()
	var sid string
	// A dev agent that has just started may not have registered its node
	// yet: a session needs one.
	testkit.WaitFor(t, "a session", func() bool {
		id, _, err := agent.Client.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorDelete}, nil)
		sid = id
		return err == nil
	})
	if ok, _, err := agent.Client.KV().Acquire(&api.KVPair{Key: key, Value: v, Session: sid}, nil); err != nil || !ok {
		t.Fatalf("acquire %s: %v %v", key, ok, err)
	}
}

// TestFleetLoadBoundedReads: what a writer of the prefix adds costs a
// follower no download of it. A key no session holds (its value 512 KiB
// of garbage) is never read, however often it is rewritten; a held key
// whose value is over MaxRecordBytes is refused by the answer's
// bound, not by a decode, and not read again while it does not change;
// keys past MaxKeys are ignored and counted; through all of it the
// valid records are summed. The recorder in front of the agent shows every
// request edge made.
func TestFleetLoadBoundedReads(t *testing.T) {
	agent := consultest.Start(t)
	rec := newConsulRecorder(t, agent.Addr)
	logs := &testkit.Buffer{}
	a := startFleetEdgeWith(t, LoadOptions{
		Client: boundedClient(t, rec.addr), ID: "a",
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	a.active.Store(2)
	kv := agent.Client.KV()
	garbage := bytes.Repeat([]byte("{not json "), 512<<10/10)
	if _, err := kv.Put(&api.KVPair{Key: "edge/edges/junk", Value: garbage}, nil); err != nil {
		t.Fatal(err)
	}
	holdKey(t, agent, "edge/edges/huge", garbage)
	holdKey(t, agent, "edge/edges/ok", []byte(`{"v":1,"id":"ok","ready":true,"connections":1,"pools":[{"name":"app","rate":0,"backends":[{"id":"b2","active":5}]}],"published":"2026-12-02T00:00:00Z"}`))
	testkit.WaitFor(t, "the good records summed beside the refused ones", func() bool {
		s, st := a.f.Snapshot(), a.f.Status()
		return s.Total("app", "b1") == 2 && s.Total("app", "b2") == 5 && st.Unheld == 1 && st.Oversized == 1
	})
	// The sessionless key rewritten, again and again: every rewrite wakes
	// the follower, none reads the key.
	for i := range 5 {
		if _, err := kv.Put(&api.KVPair{Key: "edge/edges/junk", Value: append(garbage, byte(i))}, nil); err != nil {
			t.Fatal(err)
		}
		_, meta, err := kv.Get("edge/edges/junk", nil)
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, "the rewrite read", func() bool { return a.f.Snapshot().Index >= meta.LastIndex })
	}
	if st := a.f.Status(); st.Refused != 2 || st.Unheld != 1 || st.Oversized != 1 || st.Stale {
		t.Fatalf("status %+v: want 2 refused (1 unheld, 1 oversized), fresh", st)
	}
	isGet := func(key string) func(string) bool {
		return func(r string) bool {
			return strings.HasPrefix(r, "GET /v1/kv/"+key+"?") && !strings.Contains(r, "keys")
		}
	}
	if n := rec.count(isGet("edge/edges/junk")); n != 0 {
		t.Errorf("the sessionless key was read %d times, want never", n)
	}
	if n := rec.count(isGet("edge/edges/huge")); n != 1 {
		t.Errorf("the oversized key was read %d times, want once (refused by the answer's bound, then known unchanged)", n)
	}
	if n := rec.count(func(r string) bool { return strings.Contains(r, "recurse") }); n != 0 {
		t.Errorf("%d requests listed values under the prefix", n)
	}
	log := logs.String()
	for _, want := range []string{"key=edge/edges/junk err=\"not bound to a session: not read\"", "key=edge/edges/huge err=\"value over 65536 bytes: refused unread\""} {
		if strings.Count(log, want) != 1 {
			t.Errorf("log should say once %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "fleet record:") {
		t.Errorf("a refused value was decoded:\n%s", log)
	}

	// More keys than MaxKeys, none held: the excess is ignored and
	// counted, nothing of them read, the valid records kept.
	var ops api.TxnOps
	for i := range MaxKeys {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: fmt.Sprintf("edge/edges/n%04d", i), Value: []byte("x")}})
	}
	for len(ops) > 0 {
		n := min(len(ops), 64)
		if ok, resp, _, err := agent.Client.Txn().Txn(ops[:n], nil); err != nil || !ok {
			t.Fatalf("txn: %v %v", err, resp)
		}
		ops = ops[n:]
	}
	// 1,028 valid ids: a (this edge) and ok (read before) first, then
	// huge, junk and the first 1,020 new ones checked, the last 4 ignored.
	testkit.WaitFor(t, "the excess counted", func() bool { return a.f.Status().Excess == 4 })
	s, st := a.f.Snapshot(), a.f.Status()
	if s.Total("app", "b1") != 2 || s.Total("app", "b2") != 5 || len(s.Edges) != 2 || st.Stale {
		t.Errorf("snapshot %+v status %+v: want a and ok kept", s.Edges, st)
	}
	if st.Unheld != 1+MaxKeys-4 || st.Oversized != 1 || st.Refused != st.Unheld+1+4 {
		t.Errorf("status %+v: want %d unheld, 1 oversized, 4 excess", st, 1+MaxKeys-4)
	}
	if n := rec.count(func(r string) bool { return strings.HasPrefix(r, "GET /v1/kv/edge/edges/n") }); n != 0 {
		t.Errorf("%d of the sessionless keys read, want none", n)
	}
}

// TestFleetLoadRefusesAnUnboundedClient: a client not made by NewClient
// would read whatever the prefix holds, so the follower refuses to use
// it: the sums stay stale and the status says why.
func TestFleetLoadRefusesAnUnboundedClient(t *testing.T) {
	agent := consultest.Start(t)
	a := startFleetEdgeWith(t, LoadOptions{Client: agent.Client, ID: "a"})
	testkit.WaitFor(t, "the refusal", func() bool {
		return strings.Contains(a.f.Status().LastError, "does not bound its answers")
	})
	if st := a.f.Status(); !st.Stale || len(a.f.Snapshot().Edges) != 0 {
		t.Fatalf("status %+v: want stale and nothing read", st)
	}
}

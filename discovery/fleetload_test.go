package discovery

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// testFleetEdge is one FleetLoad with a settable load of backend b1.
type testFleetEdge struct {
	f      *FleetLoad
	active atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func startFleetEdge(t *testing.T, agent *consultest.Agent, id string) *testFleetEdge {
	t.Helper()
	e := &testFleetEdge{done: make(chan struct{})}
	f, err := NewFleetLoad(FleetLoadOptions{
		Client: agent.Client, Prefix: "edge", ID: id,
		PublishEvery: 100 * time.Millisecond, WaitTime: time.Second, StaleAfter: 3 * time.Second,
		Known: func(pool, backend string) bool {
			return pool == "app" && (backend == "" || backend == "b1" || backend == "b2")
		},
		Collect: func() FleetRecord {
			n := e.active.Load()
			return FleetRecord{Ready: true, Connections: n, Pools: []FleetPoolLoad{{Name: "app", Backends: []FleetBackendLoad{{ID: "b1", Active: n}}}}}
		},
	})
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

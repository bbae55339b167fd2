package fleet

import (
	"math"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// sharesPool is a pool named name of backends ids, with its own limit of
// own connections per backend (0: none).
func sharesPool(t *testing.T, name string, own int64, ids ...string) *balance.Pool {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Name: name, MaxConnsPerBackend: own})
	if err != nil {
		t.Fatal(err)
	}
	var ms []balance.Member
	for _, id := range ids {
		ms = append(ms, balance.Member{ID: id, Addr: "127.0.0.1:1"})
	}
	if err := p.Update(ms); err != nil {
		t.Fatal(err)
	}
	return p
}

// connLimit is backend id's limit on this edge and whether it is a share.
func connLimit(t *testing.T, p *balance.Pool, id string) (int64, bool) {
	t.Helper()
	b := p.Snapshot().ByID(id)
	if b == nil {
		t.Fatalf("no backend %q", id)
	}
	return b.ConnLimit()
}

var (
	fresh = LoadStatus{}
	stale = LoadStatus{Stale: true}
	// none is Load's snapshot before Consul answered.
	none = &Snapshot{Self: "e1"}
)

// TestFleetSharesFallbackAndFresh: stale, a backend's share is the limit
// divided by the last fresh fleet size (1 before any); fresh, the smaller of
// ConnShare and ClaimCap of the fleet's counts, lowered at once.
func TestFleetSharesFallbackAndFresh(t *testing.T) {
	p := sharesPool(t, "app", 0, "a")
	fp := []Pool{{Name: "app", Pool: p, MaxConnectionsPerBackend: 10}}
	s := NewShares(nil)

	s.Apply(stale, none, fp)
	if n, shared := connLimit(t, p, "a"); n != 10 || !shared {
		t.Fatalf("stale before any answer: limit %d shared %v, want the whole 10", n, shared)
	}
	if l := s.Limits(); len(l) != 1 || !l[0].Fallback || l[0].Backends["a"] != 10 {
		t.Fatalf("limits after the fallback: %+v", l)
	}

	// e2 holds 4; e1 (this edge) has no record yet: half the room of 6.
	snap := &Snapshot{Self: "e1", Edges: []Record{{ID: "e2", Pools: []PoolLoad{
		{Name: "app", Shared: true, Backends: []BackendLoad{{ID: "a", Active: 4, Claim: 4}}},
	}}}}
	s.Apply(fresh, snap, fp)
	if n, _ := connLimit(t, p, "a"); n != 3 {
		t.Fatalf("fresh share: %d, want 3 (half of the room 10-4, lowered at once)", n)
	}
	if l := s.Limits(); len(l) != 1 || l[0].Fallback || l[0].MaxConnectionsPerBackend != 10 {
		t.Fatalf("limits fresh: %+v", l)
	}

	// Stale again: the limit divided by the fleet of 2 last read.
	s.Apply(stale, snap, fp)
	if n, _ := connLimit(t, p, "a"); n != 5 {
		t.Fatalf("stale after a fleet of 2: %d, want 5", n)
	}
}

// TestFleetSharesRaiseOncePublished: a share the fleet's counts let grow is
// claimed in the record first and enforced only once Consul holds the
// claim, never above what this edge still wants.
func TestFleetSharesRaiseOncePublished(t *testing.T) {
	p := sharesPool(t, "app", 0, "a")
	fp := []Pool{{Name: "app", Pool: p, MaxConnectionsPerBackend: 10}}
	s := NewShares(nil)
	other := func(active int64) *Snapshot {
		return &Snapshot{Self: "e1", Edges: []Record{{ID: "e2", Pools: []PoolLoad{
			{Name: "app", Shared: true, Backends: []BackendLoad{{ID: "a", Active: active, Claim: active}}},
		}}}}
	}
	s.Apply(fresh, other(4), fp)
	s.Apply(fresh, other(0), fp)
	if n, _ := connLimit(t, p, "a"); n != 3 {
		t.Fatalf("a larger share before it is published: %d, want 3 still", n)
	}
	loads := s.Loads([]*balance.Pool{p}, time.Unix(100, 0))
	if len(loads) != 1 || !loads[0].Shared || loads[0].Backend("a").Claim != 5 {
		t.Fatalf("record's loads: %+v, want app shared with a's claim 5", loads)
	}
	rec := func(claim int64) Record {
		return Record{ID: "e1", Pools: []PoolLoad{{Name: "app", Shared: true, Backends: []BackendLoad{{ID: "a", Claim: claim}}}}}
	}
	s.Published(rec(7), []*balance.Pool{p})
	if n, _ := connLimit(t, p, "a"); n != 5 {
		t.Fatalf("after a claim of 7 is published: %d, want 5 (what this edge wants)", n)
	}
	s.Published(rec(4), []*balance.Pool{p})
	if n, _ := connLimit(t, p, "a"); n != 5 {
		t.Fatalf("an older, smaller claim published: %d, want 5 kept", n)
	}
}

// TestFleetSharesLocalScopeAgain: a pool whose limit is no longer of fleet
// scope (a reload) gets its own limit back and publishes no claims.
func TestFleetSharesLocalScopeAgain(t *testing.T) {
	p := sharesPool(t, "app", 7, "a")
	s := NewShares(nil)
	s.Apply(stale, none, []Pool{{Name: "app", Pool: p, MaxConnectionsPerBackend: 10}})
	s.Apply(stale, none, []Pool{{Name: "app", Pool: p}})
	if n, shared := connLimit(t, p, "a"); n != 7 || shared {
		t.Fatalf("back to local scope: limit %d shared %v, want the pool's own 7", n, shared)
	}
	if l := s.Limits(); len(l) != 0 {
		t.Fatalf("limits of a local pool: %+v, want none", l)
	}
	if loads := s.Loads([]*balance.Pool{p}, time.Unix(100, 0)); len(loads) != 1 || loads[0].Shared || len(loads[0].Backends) != 0 {
		t.Fatalf("record's loads of a local idle pool: %+v", loads)
	}
}

// TestFleetSharesRate: a fleet connection_rate becomes the bucket's rate
// share (the rate over the fleet size stale, its weight's part fresh) and
// the burst follows in proportion.
func TestFleetSharesRate(t *testing.T) {
	p := sharesPool(t, "app", 0, "a")
	bucket := balance.NewBucket(1, 1, nil)
	fp := []Pool{{Name: "app", Pool: p, Admit: bucket, ConnectionRate: 20, ConnectionBurst: 10}}
	s := NewShares(nil)
	s.Apply(stale, none, fp)
	if r, b := bucket.Rate(); r != 20 || b != 10 {
		t.Fatalf("stale rate share: %v burst %v, want 20 and 10", r, b)
	}
	s.Apply(fresh, &Snapshot{Self: "e1", Edges: []Record{{ID: "e2"}}}, fp)
	if r, b := bucket.Rate(); r != 10 || b != 5 {
		t.Fatalf("fresh rate share of two idle edges: %v burst %v, want 10 and 5", r, b)
	}
	l := s.Limits()
	if len(l) != 1 || l[0].ConnectionRate != 20 || l[0].RateShare != 10 || l[0].Backends != nil {
		t.Fatalf("limits of a rate-only pool: %+v", l)
	}
	if n, shared := connLimit(t, p, "a"); n != 0 || shared {
		t.Fatalf("a rate-only pool's backend: limit %d shared %v, want its own (none)", n, shared)
	}
}

// TestFleetSharesLoads: the record's pools are sorted, one a name, with
// the rate of new connections between two readings rounded to a tenth and
// only the backends that hold connections.
func TestFleetSharesLoads(t *testing.T) {
	app := sharesPool(t, "app", 0, "b", "a", "c")
	chat := sharesPool(t, "chat", 0, "x")
	s := NewShares(nil)
	t0 := time.Unix(100, 0)
	if l := s.Loads([]*balance.Pool{chat, app, app}, t0); len(l) != 2 || l[0].Name != "app" || l[1].Name != "chat" || l[0].Rate != 0 {
		t.Fatalf("first loads: %+v", l)
	}
	for _, id := range []string{"b", "b", "a"} {
		app.Snapshot().ByID(id).Acquire()
	}
	l := s.Loads([]*balance.Pool{chat, app}, t0.Add(9*time.Second))
	if len(l) != 2 || l[0].Rate != 0.3 || l[1].Rate != 0 {
		t.Fatalf("rates after 3 connections in 9s: %+v, want app 0.3", l)
	}
	got := l[0].Backends
	if len(got) != 2 || got[0] != (BackendLoad{ID: "a", Active: 1}) || got[1] != (BackendLoad{ID: "b", Active: 2}) {
		t.Fatalf("app's backends: %+v, want a 1 and b 2 only", got)
	}
}

// TestFleetColumnsBoundHostileRate: a record written by anyone who can
// write the prefix, with the largest rate a record may carry (2^40), counts
// for at most the fleet's rate and burst in the edge weights, so a real
// edge keeps its rate-weighted part of the room instead of the floor alone.
func TestFleetColumnsBoundHostileRate(t *testing.T) {
	snap := &Snapshot{Self: "a", Edges: []Record{
		{ID: "a", Pools: []PoolLoad{{Name: "app", Rate: 10}}},
		{ID: "z", Pools: []PoolLoad{{Name: "app", Rate: 1 << 40}}},
	}}
	lim := Pool{MaxConnectionsPerBackend: 100, ConnectionRate: 8, ConnectionBurst: 2}
	_, self, w := fleetColumns(snap, "app", fleetRateCap(lim))
	// Both at the cap of 10 a second: even weights.
	if self != 0 || math.Abs(w-0.5) > 1e-9 {
		t.Errorf("weight of a beside a hostile rate: %v (self %d), want 0.5", w, self)
	}
	if got := fleetRateCap(Pool{MaxConnectionsPerBackend: 100}); got != maxFleetEdgeRate {
		t.Errorf("rate cap without a fleet rate: %v, want %v", got, float64(maxFleetEdgeRate))
	}
}

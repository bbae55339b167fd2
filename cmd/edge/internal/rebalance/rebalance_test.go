package rebalance

import (
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// host is a fake edge: its pool, the other edges' counts, its drain, and
// the moves it was asked for (the proxy's part is tested in proxy).
type host struct {
	pools    []Pool
	others   map[string]int64
	stale    bool
	draining bool
	moved    map[string]int
	before   time.Time
}

func (h *host) Pools() []Pool { return h.pools }
func (h *host) Fleet(_, b string) (int64, int64, bool) {
	return h.others[b], -1, !h.stale
}
func (h *host) Move(b *balance.Backend, n int, before time.Time, _ time.Duration) int {
	h.moved[b.ID()] += n
	h.before = before
	return n
}
func (h *host) Draining() bool { return h.draining }

func newHost(t *testing.T, local map[string]int) *host {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	var ms []balance.Member
	for id := range local {
		ms = append(ms, balance.Member{ID: id, Addr: "127.0.0.1:1", Weight: 1})
	}
	if err := p.Update(ms); err != nil {
		t.Fatal(err)
	}
	for _, b := range p.Snapshot().Backends {
		for range local[b.ID()] {
			b.Acquire()
		}
	}
	return &host{pools: []Pool{{Name: "app", Bal: p, MinAge: time.Minute,
		Opts: balance.RebalanceOptions{Tolerance: 0.1, Settle: time.Second, Rate: 30}}},
		others: map[string]int64{}, moved: map[string]int{}}
}

// TestRunnerMovesItsPart: with another edge holding as much as this one,
// this edge moves half the fleet's budget, off the over-share backend
// only, and only connections older than the episode and the minimum age.
func TestRunnerMovesItsPart(t *testing.T) {
	h := newHost(t, map[string]int{"b1": 100, "b2": 0})
	h.others = map[string]int64{"b1": 100}
	r := New(h, nil)
	t0 := time.Unix(1000, 0)
	r.Tick(t0)
	r.Tick(t0.Add(time.Second))
	r.Tick(t0.Add(2 * time.Second))
	if h.moved["b1"] != 15 || h.moved["b2"] != 0 {
		t.Fatalf("moved %v in the episode's first second, want b1: 15 (half the fleet's 30)", h.moved)
	}
	if want := t0.Add(2 * time.Second).Add(-time.Minute); !h.before.Equal(want) {
		t.Fatalf("moved connections opened before %s, want before %s (the minimum age; the episode is younger)", h.before, want)
	}
	if st := r.Status(); len(st) != 1 || !st[0].Active || st[0].Moved != 15 || st[0].Imbalance != 2 {
		t.Fatalf("status %+v", st)
	}
}

// TestRunnerStops: a drain, or the fleet's numbers stale, stop the
// episode; it settles again afterwards.
func TestRunnerStops(t *testing.T) {
	for _, stop := range []func(h *host){
		func(h *host) { h.draining = true },
		func(h *host) { h.stale = true },
	} {
		h := newHost(t, map[string]int{"b1": 100, "b2": 0})
		r := New(h, nil)
		t0 := time.Unix(1000, 0)
		r.Tick(t0)
		r.Tick(t0.Add(time.Second))
		stop(h)
		r.Tick(t0.Add(2 * time.Second))
		if len(h.moved) != 0 || r.Status()[0].Active {
			t.Fatalf("moved %v while stopped, status %+v", h.moved, r.Status())
		}
		h.draining, h.stale = false, false
		r.Tick(t0.Add(3 * time.Second))
		if r.Status()[0].Active {
			t.Fatal("an episode without settling again")
		}
	}
}

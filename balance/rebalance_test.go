package balance

import (
	"testing"
	"time"
)

// scaleOut is four backends of equal weight holding 30,000 connections
// over three edges, two more just added: the shape of a scale-out.
func scaleOut(local func(fleet int64) int64) []BackendLoad {
	bs := []BackendLoad{}
	for _, id := range []string{"a", "b", "c", "d"} {
		bs = append(bs, BackendLoad{ID: id, Weight: 1, Fleet: 7500, Local: local(7500)})
	}
	return append(bs, BackendLoad{ID: "e", Weight: 1}, BackendLoad{ID: "f", Weight: 1})
}

// TestRebalanceSettlesThenMoves: an imbalance must last the settling time
// before anything moves; then the edge moves its part of the budget,
// only off the backends above their share.
func TestRebalanceSettlesThenMoves(t *testing.T) {
	r := NewRebalancer(RebalanceOptions{Tolerance: 0.1, Settle: 30 * time.Second, Rate: 300})
	t0 := time.Unix(1000, 0)
	bs := scaleOut(func(n int64) int64 { return n / 3 })
	if p := r.Tick(t0, bs); p.Active || p.Moves != nil || p.Imbalance != 1.5 {
		t.Fatalf("at once: %+v, want no episode, imbalance 1.5", p)
	}
	if p := r.Tick(t0.Add(29*time.Second), bs); p.Active {
		t.Fatalf("before the settling time: %+v", p)
	}
	if p := r.Tick(t0.Add(30*time.Second), bs); !p.Active || p.Moves != nil {
		t.Fatalf("at the settling time: %+v, want the episode started, nothing spent yet", p)
	}
	p := r.Tick(t0.Add(31*time.Second), bs)
	total := 0
	for id, n := range p.Moves {
		if id == "e" || id == "f" {
			t.Fatalf("moves off an under-share backend: %v", p.Moves)
		}
		total += n
	}
	// 300/s over the fleet, a third of it on this edge.
	if total != 100 {
		t.Fatalf("this edge moves %d in a second (%v), want 100: its third of the fleet's 300", total, p.Moves)
	}
}

// TestRebalanceCarriesFractions: a budget under one connection a tick
// still moves, the fractions carried from tick to tick.
func TestRebalanceCarriesFractions(t *testing.T) {
	r := NewRebalancer(RebalanceOptions{Settle: time.Second, Rate: 6})
	t0 := time.Unix(1000, 0)
	bs := scaleOut(func(n int64) int64 { return n / 3 })
	r.Tick(t0, bs)
	r.Tick(t0.Add(time.Second), bs)
	total := 0
	for i := 2; i <= 11; i++ {
		for _, n := range r.Tick(t0.Add(time.Duration(i)*time.Second), bs).Moves {
			total += n
		}
	}
	// 6/s over the fleet, a third here: 20 in 10 s, give or take what is
	// still carried.
	if total < 19 || total > 20 {
		t.Fatalf("moved %d in 10 s, want 20", total)
	}
}

// TestRebalanceHysteresis: an episode lasts until the imbalance is within
// half the tolerance, not merely within the tolerance, and a new one
// settles again.
func TestRebalanceHysteresis(t *testing.T) {
	r := NewRebalancer(RebalanceOptions{Tolerance: 0.2, Settle: time.Second, Rate: 10})
	t0 := time.Unix(1000, 0)
	at := func(s int, a, b int64) Plan {
		return r.Tick(t0.Add(time.Duration(s)*time.Second), []BackendLoad{{ID: "a", Weight: 1, Fleet: a, Local: a}, {ID: "b", Weight: 1, Fleet: b, Local: b}})
	}
	at(0, 150, 50)
	if p := at(1, 150, 50); !p.Active {
		t.Fatal("no episode at 1.5x")
	}
	if p := at(2, 115, 85); !p.Active {
		t.Fatal("the episode ended at 1.15x, inside the tolerance but above half of it")
	}
	if p := at(3, 108, 92); p.Active {
		t.Fatal("the episode goes on at 1.08x, within half the tolerance")
	}
	if p := at(4, 150, 50); p.Active {
		t.Fatal("a new episode without settling")
	}
}

// TestRebalanceLeavesWhatTakesNothing: backends that take no connections
// (weight 0) have no share and lose nothing to rebalancing; a pool with
// no load is balanced.
func TestRebalanceLeavesWhatTakesNothing(t *testing.T) {
	r := NewRebalancer(RebalanceOptions{Settle: time.Second, Rate: 1000})
	t0 := time.Unix(1000, 0)
	bs := []BackendLoad{{ID: "drained", Weight: 0, Fleet: 900, Local: 900}, {ID: "a", Weight: 1, Fleet: 100, Local: 100}, {ID: "b", Weight: 1, Fleet: 100, Local: 100}}
	for i := 0; i < 3; i++ {
		if p := r.Tick(t0.Add(time.Duration(i)*time.Second), bs); p.Active || p.Moves != nil {
			t.Fatalf("tick %d: %+v", i, p)
		}
	}
	if p := r.Tick(t0, nil); p.Imbalance != 0 || p.Active {
		t.Fatalf("empty pool: %+v", p)
	}
}

// TestRebalanceNeverBelowTheBand: however large the budget, a backend is
// not taken below its share's band, nor past what this edge holds.
func TestRebalanceNeverBelowTheBand(t *testing.T) {
	r := NewRebalancer(RebalanceOptions{Tolerance: 0.1, Settle: time.Second, Rate: 1e6})
	t0 := time.Unix(1000, 0)
	bs := []BackendLoad{{ID: "a", Weight: 1, Fleet: 300, Local: 40}, {ID: "b", Weight: 1, Fleet: 100, Local: 10}}
	r.Tick(t0, bs)
	r.Tick(t0.Add(time.Second), bs)
	p := r.Tick(t0.Add(2*time.Second), bs)
	// Fair share 200, band 1.05: at most 90 over the fleet; this edge
	// holds 40 of a's 300, so its part is 12.
	if p.Moves["a"] != 12 || len(p.Moves) != 1 {
		t.Fatalf("moves %v, want a: 12", p.Moves)
	}
}

// TestRebalanceShedsEverything: a promoted canary's other side is shed:
// every connection on it moves, at the budget, and the episode ends only
// when none is left.
func TestRebalanceShedsEverything(t *testing.T) {
	r := NewRebalancer(RebalanceOptions{Tolerance: 0.02, Settle: time.Second, Rate: 100})
	t0 := time.Unix(1000, 0)
	bs := []BackendLoad{{ID: "old", Shed: true, Fleet: 250, Local: 250}, {ID: "new", Weight: 1, Fleet: 50, Local: 50}}
	r.Tick(t0, bs)
	moved := 0
	for i := 1; i < 10; i++ {
		p := r.Tick(t0.Add(time.Duration(i)*time.Second), bs)
		if n := p.Moves["new"]; n != 0 {
			t.Fatalf("moves off the version's side: %v", p.Moves)
		}
		n := p.Moves["old"]
		if n > 100 {
			t.Fatalf("second %d: %d moves, over the budget of 100", i, n)
		}
		moved += n
		bs[0].Fleet -= int64(n)
		bs[0].Local -= int64(n)
		bs[1].Fleet += int64(n)
		if bs[0].Fleet == 0 {
			break
		}
	}
	if moved != 250 {
		t.Fatalf("moved %d of the shed side's 250", moved)
	}
	if p := r.Tick(t0.Add(20*time.Second), bs); p.Active || p.Shedding != 0 {
		t.Fatalf("nothing left to shed, yet %+v", p)
	}
}

// TestRebalanceMovesAtItsRate: an edge's part of the budget (3.33 a
// second over four backends) is moved every tick, 3 or 4, never in
// bursts of nothing then one on every backend.
func TestRebalanceMovesAtItsRate(t *testing.T) {
	r := NewRebalancer(RebalanceOptions{Settle: time.Second, Rate: 10})
	t0 := time.Unix(1000, 0)
	bs := scaleOut(func(n int64) int64 { return n / 3 })
	r.Tick(t0, bs)
	r.Tick(t0.Add(time.Second), bs)
	total := 0
	for i := 2; i <= 31; i++ {
		n := 0
		for _, m := range r.Tick(t0.Add(time.Duration(i)*time.Second), bs).Moves {
			n += m
		}
		if n < 3 || n > 4 {
			t.Fatalf("tick %d moves %d, want 3 or 4 (a third of 10 a second)", i, n)
		}
		total += n
	}
	if total != 100 {
		t.Fatalf("30 ticks moved %d, want 100", total)
	}
}

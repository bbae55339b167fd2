package ready

import (
	"testing"
	"time"
)

// TestTrimmerWaitsForStillness: memory is returned only after a burst of
// connections, once neither new connections nor socket events have been
// seen for trimQuiet, and at most once per trimEvery: the forced
// collection must never pause traffic.
func TestTrimmerWaitsForStillness(t *testing.T) {
	var tr trimmer
	sec := func(s float64) int64 { return int64(s * float64(time.Second)) }
	now := sec(1000)
	step := func(d float64, adds int64, act uint64) bool {
		now += sec(d)
		return tr.due(now, adds, act)
	}
	if step(0, trimAfterConns, 5) {
		t.Fatal("due while connections were still arriving")
	}
	// Traffic goes on: never due.
	for i := range 10 {
		if step(1, trimAfterConns, uint64(6+i)) {
			t.Fatalf("due while events flow (second %d)", i)
		}
	}
	// The last event was at act 15: one second of stillness is not enough.
	if step(1, trimAfterConns, 15) {
		t.Fatal("due before trimQuiet of stillness")
	}
	if !step(1, trimAfterConns, 15) {
		t.Fatal("not due after a burst and trimQuiet of stillness")
	}
	tr.done(now)
	// A second burst within trimEvery waits for trimEvery.
	step(1, 2*trimAfterConns, 15)
	if step(5, 2*trimAfterConns, 15) {
		t.Fatal("due twice within trimEvery")
	}
	if !step(trimEvery.Seconds(), 2*trimAfterConns, 15) {
		t.Fatal("not due after trimEvery")
	}
	tr.done(now)
	// Fewer than trimAfterConns new connections: never due.
	step(1, 2*trimAfterConns+10, 15)
	if step(trimEvery.Seconds()+10, 2*trimAfterConns+10, 15) {
		t.Fatal("due after a handful of connections")
	}
}

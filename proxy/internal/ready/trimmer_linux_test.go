package ready

import (
	"testing"
	"time"
)

// TestTrimmerFiresOnceTheBurstIsOver: memory is returned after a burst of
// at least trimAfterConns new connections, once no more than
// trimTrickle further connections arrived within trimQuiet, whatever the
// traffic of the connections already up (the trimmer does not even see
// it: a steady 1 % of messages and the pings never leave a socket still
// for long, and waiting for stillness kept the burst's garbage for good),
// and at most once per trimEvery.
func TestTrimmerFiresOnceTheBurstIsOver(t *testing.T) {
	var tr trimmer
	sec := func(s float64) int64 { return int64(s * float64(time.Second)) }
	now := sec(1000)
	step := func(d float64, adds int64) bool {
		now += sec(d)
		return tr.due(now, adds)
	}
	// A burst: a hundred new connections a second, never due.
	adds := int64(0)
	for i := range 3 * trimAfterConns / 100 {
		adds += 100
		if step(1, adds) {
			t.Fatalf("due while connections were arriving (second %d)", i)
		}
	}
	// The burst is over but for a trickle of reconnects: due once
	// trimQuiet has passed, not before.
	// (one every half second).
	end := now
	for i := 0; ; i++ {
		if i%2 == 1 {
			adds++
		}
		if step(0.25, adds) {
			break
		}
		if now-end > sec(2*trimQuiet.Seconds()) {
			t.Fatal("not due after the burst ended")
		}
	}
	if now-end < int64(trimQuiet) {
		t.Fatalf("due %v after the burst, before trimQuiet", time.Duration(now-end))
	}
	tr.done(now)

	// Another burst within trimEvery waits for trimEvery.
	adds += trimAfterConns
	step(1, adds)
	if step(trimQuiet.Seconds()+1, adds) {
		t.Fatal("due twice within trimEvery")
	}
	if !step(trimEvery.Seconds(), adds) {
		t.Fatal("not due after trimEvery")
	}
	tr.done(now)

	// Churn faster than the trickle never counts as over.
	for i := range 2 * int(trimEvery/trimQuiet) {
		adds += 3 * trimTrickle
		if step(trimQuiet.Seconds()/2, adds) {
			t.Fatalf("due while connections kept arriving (step %d, %d since the trim)", i, adds-tr.trimmedAdds)
		}
	}

	// Fewer than trimAfterConns new connections: never due.
	tr.done(now)
	adds += 10
	step(1, adds)
	if step(trimEvery.Seconds()+10, adds) {
		t.Fatal("due after a handful of connections")
	}
}

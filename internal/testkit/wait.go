package testkit

import (
	"runtime"
	"testing"
	"time"
)

// waitBound is how long WaitFor and WaitGoroutines wait: far beyond what
// any condition of a test on loopback needs, even on a slow, busy machine
// under the race detector, so reaching it is a failure (and raising it
// costs nothing when the condition holds).
const waitBound = 30 * time.Second

// maxPoll bounds the pause between two looks at a condition.
const maxPoll = 100 * time.Millisecond

// WaitFor polls cond until it holds, or fails the test after a bounded
// wait naming what it waited for. Use it where there is no event to wait
// on, never a sleep.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Await(t, waitBound, what, func() (bool, string) { return cond(), "" })
}

// Await polls cond until it holds, or fails the test after bound with the
// last state cond described. It is WaitFor for conditions read from
// outside a process (an admin endpoint, a metrics server) whose state is
// worth reporting.
func Await(t testing.TB, bound time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(bound)
	pause := time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state != "" {
				t.Fatalf("timed out after %v waiting for %s; last: %s", bound, what, state)
			}
			t.Fatalf("timed out after %v waiting for %s", bound, what)
		}
		time.Sleep(pause) // polling: the condition has no event to wait on
		pause = min(2*pause, maxPoll)
	}
}

// WaitGoroutines waits until no more than base goroutines run, or fails
// the test with every goroutine's stack.
func WaitGoroutines(t testing.TB, base int) {
	t.Helper()
	var n int
	deadline := time.Now().Add(waitBound)
	pause := time.Millisecond
	for {
		if n = runtime.NumGoroutine(); n <= base {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(pause) // goroutines ending have no event to wait on
		pause = min(2*pause, maxPoll)
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	t.Fatalf("goroutines: got %d, want <= %d\n%s", n, base, buf)
}

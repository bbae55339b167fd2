//go:build !windows

package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// testGate is a Gate the test opens: Acquire says who holds the slot, then
// waits for open (or fails with refuse), and counts releases.
type testGate struct {
	open     chan struct{}
	refuse   error
	acquired atomic.Int32
	released atomic.Int32
}

func (g *testGate) Acquire(ctx context.Context, bound time.Duration, waiting func(string)) (func(), error) {
	waiting("edge-a (pid 1)")
	if g.refuse != nil {
		return nil, g.refuse
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.acquired.Add(1)
	return func() { g.released.Add(1) }, nil
}

// TestGateWaitsThenReleasesOnFailure: an upgrade waits for the fleet's
// slot, saying so in State, starts the new process only once it has one,
// and gives it back when that process fails.
func TestGateWaitsThenReleasesOnFailure(t *testing.T) {
	g := &testGate{open: make(chan struct{})}
	u, _ := serving(t, Options{Child: self(t, "exit"), Gate: g, GateWait: time.Minute})
	done := make(chan error, 1)
	go func() { done <- u.Upgrade("", "test") }()
	testkit.WaitFor(t, "the upgrade waiting for a slot", func() bool {
		return strings.HasPrefix(u.State(), "waiting for a fleet upgrade slot (")
	})
	if s := u.State(); !strings.HasSuffix(s, "of 1m0s): held by edge-a (pid 1)") {
		t.Errorf("state while waiting: %q", s)
	}
	if err := u.Upgrade("", "test"); !errors.Is(err, ErrRefused) {
		t.Errorf("a second upgrade while one waits: %v, want a refusal", err)
	}
	close(g.open)
	err := <-done
	if err == nil || errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("upgrade to a process that exits: %v", err)
	}
	if g.acquired.Load() != 1 || g.released.Load() != 1 {
		t.Errorf("slot taken %d, given back %d times; want 1 and 1", g.acquired.Load(), g.released.Load())
	}
	if s := u.State(); s != "ready" {
		t.Errorf("state after: %q", s)
	}
}

// TestGateRefusalStartsNothing: no slot within the bound is a refusal
// that names the holders, and no process is started.
func TestGateRefusalStartsNothing(t *testing.T) {
	g := &testGate{refuse: errors.New("no fleet upgrade slot free within 2s: held by edge-a (pid 1)")}
	c := self(t, "exit")
	c.Path = t.TempDir() + "/not-started"
	u, _ := serving(t, Options{Child: c, Gate: g, GateWait: 2 * time.Second})
	err := u.Upgrade("", "test")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "held by edge-a") || !strings.Contains(err.Error(), "keeps serving") {
		t.Errorf("upgrade without a slot: %v, want a refusal naming the holder", err)
	}
	if s := u.State(); s != "ready" {
		t.Errorf("state after: %q", s)
	}
}

// TestGateGivenBackByStopRightAfterSuccess: a Stop that comes between
// the new process's readiness and the rest of Upgrade gives the slot
// back: the attempted hook runs Stop exactly there.
func TestGateGivenBackByStopRightAfterSuccess(t *testing.T) {
	g := &testGate{open: make(chan struct{})}
	close(g.open)
	u, ln := serving(t, Options{Gate: g, GateWait: time.Minute})
	u.opts.Child = self(t, "serve", addrEnv+"="+ln.Addr().String())
	u.attempted = u.Stop
	if err := u.Upgrade("", "test"); err != nil {
		t.Fatal(err)
	}
	if g.acquired.Load() != 1 || g.released.Load() != 1 {
		t.Errorf("slot taken %d, given back %d times by a Stop right after the attempt; want 1 and 1", g.acquired.Load(), g.released.Load())
	}
	_ = ln.Close()
	readReport(t, ln.Addr().String()) // the new process ends after it
}

// TestGateHeldUntilHandOffDone: after a success the slot stays taken
// until the hand-off is over, and is given back once.
func TestGateHeldUntilHandOffDone(t *testing.T) {
	g := &testGate{open: make(chan struct{})}
	close(g.open)
	u, ln := serving(t, Options{Gate: g, GateWait: time.Minute})
	c := self(t, "serve", addrEnv+"="+ln.Addr().String())
	u.opts.Child = c
	if err := u.Upgrade("", "test"); err != nil {
		t.Fatal(err)
	}
	if g.released.Load() != 0 {
		t.Errorf("slot given back before the hand-off was over")
	}
	_, _ = fmt.Fprintln(u.Handoff(), "over") // what the new process waits for
	_ = ln.Close()
	readReport(t, ln.Addr().String()) // the new process ends after it
	u.HandOffDone()
	u.Stop()
	if g.acquired.Load() != 1 || g.released.Load() != 1 {
		t.Errorf("slot taken %d, given back %d times; want 1 and 1", g.acquired.Load(), g.released.Load())
	}
}

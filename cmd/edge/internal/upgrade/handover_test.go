package upgrade

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// fakeServer records what HandOver asks of it, in order.
type fakeServer struct {
	calls  []string
	active int
	// left is what a Handoff leaves live; err what it returns.
	left int
	err  error
	to   *net.UnixConn
	// The deadlines of the contexts StopAccepting and Handoff got.
	stopBy, handoffBy time.Time
}

func (f *fakeServer) StopAccepting(ctx context.Context) {
	f.calls = append(f.calls, "stop")
	f.stopBy, _ = ctx.Deadline()
}
func (f *fakeServer) Active() int { return f.active }
func (f *fakeServer) Handoff(ctx context.Context, to *net.UnixConn, w time.Duration) (int, int, error) {
	f.calls = append(f.calls, "handoff")
	f.handoffBy, _ = ctx.Deadline()
	f.to = to
	moved := f.active - f.left
	f.active = f.left
	return moved, 0, f.err
}
func (f *fakeServer) Drain(context.Context, time.Duration) {
	f.calls = append(f.calls, "drain")
	f.active = 0
}
func (f *fakeServer) Close() error { f.calls = append(f.calls, "close"); return nil }

// handOffSocket gives u one end of a connected unix socket as its hand-off
// socket and returns the other end.
func handOffSocket(t *testing.T, u *Upgrader) *net.UnixConn {
	t.Helper()
	addr := &net.UnixAddr{Name: filepath.Join(t.TempDir(), "h.sock"), Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		t.Skipf("unix sockets: %v", err)
	}
	defer ln.Close()
	near, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	far, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { far.Close() })
	u.handoff = near
	return far
}

// TestHandOverMovesThenReleasesSlot: listeners stop first, the live
// WebSockets go over the hand-off socket and are counted, nothing is left
// to drain, the socket is closed and the fleet's slot given back last.
func TestHandOverMovesThenReleasesSlot(t *testing.T) {
	u := New(Options{})
	far := handOffSocket(t, u)
	released := 0
	release := func() { released++ }
	u.slot.Store(&release)
	srv := &fakeServer{active: 5}
	var counted [2]int
	u.HandOver(context.Background(), srv, HandOverOptions{Window: time.Second, HandedOff: func(m, c int) { counted = [2]int{m, c} }})
	if want := []string{"stop", "handoff", "close"}; !slices.Equal(srv.calls, want) {
		t.Errorf("calls %v, want %v", srv.calls, want)
	}
	if srv.to == nil || counted != [2]int{5, 0} {
		t.Errorf("hand-off to %v counted %v, want the socket and 5 moved", srv.to, counted)
	}
	if released != 1 {
		t.Errorf("slot given back %d times, want once", released)
	}
	// Our end is closed: the far end reads EOF.
	if _, err := far.Read(make([]byte, 1)); err == nil {
		t.Error("hand-off socket still open after HandOver")
	}
}

// TestHandOverFailedDrainsRest: what a failed hand-off leaves drains.
func TestHandOverFailedDrainsRest(t *testing.T) {
	u := New(Options{})
	handOffSocket(t, u)
	srv := &fakeServer{active: 5, left: 2, err: errors.New("broken pipe")}
	u.HandOver(context.Background(), srv, HandOverOptions{})
	if want := []string{"stop", "handoff", "drain", "close"}; !slices.Equal(srv.calls, want) {
		t.Errorf("calls %v, want %v", srv.calls, want)
	}
}

// TestHandOverWithoutSocketDrains: a new process that takes no
// connections (no hand-off socket) leaves them to a drain.
func TestHandOverWithoutSocketDrains(t *testing.T) {
	u := New(Options{})
	srv := &fakeServer{active: 3}
	u.HandOver(context.Background(), srv, HandOverOptions{HandedOff: func(int, int) { t.Error("a hand-off counted without a socket") }})
	if want := []string{"stop", "drain", "close"}; !slices.Equal(srv.calls, want) {
		t.Errorf("calls %v, want %v", srv.calls, want)
	}
}

// TestHandOverBoundGrowsWithCount: stopping to accept is bounded by the
// timeout (drain.timeout), and the hand-off by the timeout and
// handOverPerConn for each live WebSocket, both from the start: 9,900
// connections are not held to 30 s, and the bound is still known.
func TestHandOverBoundGrowsWithCount(t *testing.T) {
	const timeout, n = 30 * time.Second, 9900
	u := New(Options{})
	handOffSocket(t, u)
	srv := &fakeServer{active: n}
	before := time.Now()
	u.HandOver(context.Background(), srv, HandOverOptions{Timeout: timeout})
	after := time.Now()
	within := func(what string, got time.Time, d time.Duration) {
		t.Helper()
		if got.Before(before.Add(d)) || got.After(after.Add(d)) {
			t.Errorf("%s bounded at %v after the start, want %v", what, got.Sub(before), d)
		}
	}
	within("StopAccepting", srv.stopBy, timeout)
	within("Handoff", srv.handoffBy, timeout+n*handOverPerConn)
	if got, want := handOverBound(timeout, n), 79500*time.Millisecond; got != want {
		t.Errorf("bound of %d connections: %v, want %v", n, got, want)
	}
}

// TestHandOverWithoutTimeout: no timeout, no bound of HandOver's own.
func TestHandOverWithoutTimeout(t *testing.T) {
	u := New(Options{})
	handOffSocket(t, u)
	srv := &fakeServer{active: 3}
	u.HandOver(context.Background(), srv, HandOverOptions{})
	if !srv.stopBy.IsZero() || !srv.handoffBy.IsZero() {
		t.Errorf("deadlines %v %v, want none", srv.stopBy, srv.handoffBy)
	}
}

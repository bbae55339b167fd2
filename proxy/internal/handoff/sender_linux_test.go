package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// The sender's tests run Move against a peer of the test's own over a
// Unix socketpair, with fake connections: each message carries a pipe's
// two descriptors through SCM_RIGHTS, as a connection's would.

// fixture is what the fake connections of one test share: the
// descriptors their messages carry, the message, and how many items are
// held (frozen, not settled yet), at most.
type fixture struct {
	fds       [2]int
	msg       []byte
	held, max int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	msg, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{fds: [2]int{int(r.Fd()), int(w.Fd())}, msg: msg}
}

// conns are n fake connections that freeze at once.
func (f *fixture) conns(n int) []*fakeConn {
	cs := make([]*fakeConn, n)
	for i := range cs {
		cs[i] = &fakeConn{f: f, id: i}
	}
	return cs
}

// fakeConn is a connection whose Freeze answers busy first, then res
// (Held: an item).
type fakeConn struct {
	f       *fixture
	id      int
	busy    int    // Freeze answers Busy this many times first
	res     Result // then this; Held gives an item
	freezes int
	thawed  int
	forgot  int
}

func (c *fakeConn) Freeze() (Item, []byte, Result) {
	c.freezes++
	if c.busy > 0 {
		c.busy--
		return nil, nil, Busy
	}
	if c.res != Held {
		return nil, nil, c.res
	}
	c.f.held++
	c.f.max = max(c.f.max, c.f.held)
	return (*fakeItem)(c), c.f.msg, Held
}

// fakeItem is a fakeConn held still.
type fakeItem fakeConn

func (it *fakeItem) FDs() (int, int) { return it.f.fds[0], it.f.fds[1] }
func (it *fakeItem) Thaw()           { it.thawed++; it.f.held-- }
func (it *fakeItem) Forget()         { it.forgot++; it.f.held-- }

// What peer does with a message.
type act int

const (
	reply  act = iota // answer it
	silent            // answer nothing, read on
	stop              // answer nothing, write the batch's answers so far and stop (the socket stays open)
)

// peer reads messages from c and answers them as answer says, reading
// batch messages before it writes their answers in one write. It closes
// the descriptors it received, and reports how many messages it read on
// done.
func peer(t *testing.T, c *net.UnixConn, batch int, answer func(i int) (byte, act)) <-chan int {
	done := make(chan int, 1)
	go func() {
		i := 0
		defer func() { done <- i }()
		for {
			var acks []byte
			for range batch {
				m, err := Receive(c)
				if err != nil {
					c.Write(acks)
					return
				}
				m.Close()
				ack, what := answer(i)
				i++
				switch what {
				case stop:
					c.Write(acks)
					return
				case reply:
					acks = append(acks, ack)
				}
			}
			if _, err := c.Write(acks); err != nil {
				return
			}
		}
	}()
	return done
}

func adoptAll(int) (byte, act) { return AckAdopted, reply }

// settled checks that every connection of cs was frozen and settled
// once, forgotten or thawed as want says.
func settled(t *testing.T, cs []*fakeConn, forgotten func(c *fakeConn) bool) {
	t.Helper()
	for _, c := range cs {
		want := [2]int{0, 1}
		if forgotten(c) {
			want = [2]int{1, 0}
		}
		if got := [2]int{c.forgot, c.thawed}; got != want {
			t.Errorf("conn %d: forgotten %d thawed %d times, want %v", c.id, got[0], got[1], want)
		}
	}
}

// TestMoveWindow: a peer that reads a whole window before it answers
// any gets every connection (the sender does not wait for each answer),
// and no more than Window items are ever held at once.
func TestMoveWindow(t *testing.T) {
	const n, window = 20, 4
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	done := peer(t, b, window, adoptAll)
	cs := f.conns(n)
	moved, left, err := Move(context.Background(), a, cs, Options{Window: window})
	if err != nil || moved != n || len(left) != 0 {
		t.Fatalf("Move: moved %d left %d (%v), want %d 0", moved, len(left), err, n)
	}
	if f.max != window {
		t.Errorf("at most %d held at once, want the window, %d", f.max, window)
	}
	settled(t, cs, func(*fakeConn) bool { return true })
	a.CloseWrite()
	if got := <-done; got != n {
		t.Errorf("the peer read %d messages, want %d", got, n)
	}
}

// TestMoveWindowBytes: the window's bytes bound it too.
func TestMoveWindowBytes(t *testing.T) {
	const n = 12
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	peer(t, b, 1, adoptAll)
	cs := f.conns(n)
	moved, _, err := Move(context.Background(), a, cs, Options{WindowBytes: 3 * len(f.msg)})
	if err != nil || moved != n {
		t.Fatalf("Move: moved %d (%v), want %d", moved, err, n)
	}
	if f.max > 3 {
		t.Errorf("%d held at once, over the 3 messages' bytes", f.max)
	}
}

// TestMoveRefused: refused connections are thawed and stay, in the
// order of their answers; the others move.
func TestMoveRefused(t *testing.T) {
	const n = 10
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	peer(t, b, 5, func(i int) (byte, act) {
		if i%3 == 1 {
			return AckRefused, reply
		}
		return AckAdopted, reply
	})
	cs := f.conns(n)
	moved, left, err := Move(context.Background(), a, cs, Options{})
	if err != nil || moved != n-3 || len(left) != 3 {
		t.Fatalf("Move: moved %d left %d (%v), want %d 3", moved, len(left), err, n-3)
	}
	for i, c := range left {
		if c.id != 3*i+1 {
			t.Errorf("left[%d] is conn %d, want %d", i, c.id, 3*i+1)
		}
	}
	settled(t, cs, func(c *fakeConn) bool { return c.id%3 != 1 })
}

// TestMoveRetry: a busy connection is tried again in the next round
// while RetryFor lasts, and stays, never frozen, once it is over.
func TestMoveRetry(t *testing.T) {
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	peer(t, b, 1, adoptAll)
	cs := f.conns(3)
	cs[1].busy = 2
	moved, left, err := Move(context.Background(), a, cs, Options{RetryFor: time.Hour, RetryWait: time.Nanosecond})
	if err != nil || moved != 3 || len(left) != 0 || cs[1].freezes != 3 {
		t.Fatalf("Move: moved %d left %d (%v), busy conn frozen %d times, want 3 0 and 3", moved, len(left), err, cs[1].freezes)
	}

	cs = f.conns(3)
	cs[1].busy = 2
	moved, left, err = Move(context.Background(), a, cs, Options{RetryFor: time.Nanosecond})
	if err != nil || moved != 2 || len(left) != 1 || left[0] != cs[1] || cs[1].freezes != 1 {
		t.Fatalf("Move past RetryFor: moved %d left %v (%v), busy conn frozen %d times, want 2, it, once", moved, left, err, cs[1].freezes)
	}
}

// TestMoveNeverAndGone: a connection that cannot move stays; one that
// ended meanwhile neither moves nor stays.
func TestMoveNeverAndGone(t *testing.T) {
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	peer(t, b, 1, adoptAll)
	cs := f.conns(3)
	cs[0].res, cs[2].res = Never, Gone
	moved, left, err := Move(context.Background(), a, cs, Options{})
	if err != nil || moved != 1 || len(left) != 1 || left[0] != cs[0] {
		t.Fatalf("Move: moved %d left %v (%v), want 1 and conn 0", moved, left, err)
	}
}

// TestMoveStall: a peer that reads messages and answers nothing ends
// the hand-off at the stall bound with ErrStalled; every connection in
// flight may run in the peer, so each is given up (forgotten, counted
// moved), and the socket's deadline is lifted after.
func TestMoveStall(t *testing.T) {
	const n = 6
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	peer(t, b, 1, func(int) (byte, act) { return 0, silent })
	cs := f.conns(n)
	moved, left, err := Move(context.Background(), a, cs, Options{Stall: 50 * time.Millisecond})
	if !errors.Is(err, ErrStalled) || moved != n || len(left) != 0 {
		t.Fatalf("Move: moved %d left %d (%v), want %d 0 and ErrStalled", moved, len(left), err, n)
	}
	settled(t, cs, func(*fakeConn) bool { return true })
	if _, err := a.Write([]byte{0}); err != nil {
		t.Errorf("the socket after a stall: %v, want its deadline lifted", err)
	}
}

// TestMoveContextEnds: the context's end is a deadline too: in-flight
// connections are given up, the error names the cause, and the
// socket's deadline stays in the past.
func TestMoveContextEnds(t *testing.T) {
	const n = 4
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	peer(t, b, 1, func(i int) (byte, act) {
		if i == n-1 {
			cancel()
		}
		return 0, silent
	})
	cs := f.conns(n)
	moved, left, err := Move(ctx, a, cs, Options{})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, os.ErrDeadlineExceeded) || moved != n || len(left) != 0 {
		t.Fatalf("Move: moved %d left %d (%v), want %d 0 and the context's end", moved, len(left), err, n)
	}
	if _, err := a.Write([]byte{0}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the socket after the context ended: %v, want its deadline in the past", err)
	}
}

// TestMoveBroken: a peer that answers some and closes the socket: the
// answered move, every other in flight is thawed (the peer does not hold
// it) and stays, and so does every one not sent yet.
func TestMoveBroken(t *testing.T) {
	const n, took = 10, 3
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	done := peer(t, b, 5, func(i int) (byte, act) {
		if i < took {
			return AckAdopted, reply
		}
		return 0, stop
	})
	go func() { <-done; b.Close() }()
	cs := f.conns(n)
	moved, left, err := Move(context.Background(), a, cs, Options{Window: 5})
	if err == nil || errors.Is(err, ErrStalled) || moved != took || len(left) != n-took {
		t.Fatalf("Move: moved %d left %d (%v), want %d %d and the socket's error", moved, len(left), err, took, n-took)
	}
	settled(t, cs[:took], func(*fakeConn) bool { return true })
	for _, c := range cs[took:] {
		// Sent before the failure was seen, or not frozen at all.
		if c.forgot != 0 || c.thawed != c.freezes || c.freezes > 1 {
			t.Errorf("conn %d: frozen %d, forgotten %d, thawed %d times; want it thawed if frozen", c.id, c.freezes, c.forgot, c.thawed)
		}
	}
}

// TestMoveUnknownAnswer: an answer this release does not know leaves
// unknown whether the peer holds that connection: it and every one in
// flight behind it are given up (forgotten), none is resumed here.
func TestMoveUnknownAnswer(t *testing.T) {
	const n = 6
	f := newFixture(t)
	a, b := testkit.UnixPair(t)
	peer(t, b, n, func(i int) (byte, act) {
		if i == 2 {
			return 0x7f, reply
		}
		return AckAdopted, reply
	})
	cs := f.conns(n)
	moved, left, err := Move(context.Background(), a, cs, Options{})
	if err == nil || moved != n || len(left) != 0 {
		t.Fatalf("Move: moved %d left %d (%v), want %d 0 and an error", moved, len(left), err, n)
	}
	settled(t, cs, func(*fakeConn) bool { return true })
}

// TestOptionsDefaults: a zero or negative field takes its default, any
// other stays.
func TestOptionsDefaults(t *testing.T) {
	got := Options{Window: -1}.withDefaults()
	want := Options{DefaultWindow, DefaultWindowBytes, DefaultStall, DefaultRetryFor, DefaultRetryWait}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	set := Options{1, 2, 3, 4, 5}
	if got := set.withDefaults(); got != set {
		t.Errorf("%+v with defaults is %+v", set, got)
	}
}

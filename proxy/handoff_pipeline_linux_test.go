package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/proxy/internal/handoff"
	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"
)

// peerAct is what relayPeer does with one message.
type peerAct int

const (
	peerPass   peerAct = iota // pass it on to B and answer what B answered
	peerRefuse                // close its descriptors and answer AckRefused
	peerBreak                 // answer the messages before it, then close the socket to A
	peerHang                  // keep it and everything after, answer nothing more
	peerGarble                // pass it on to B, answer a byte that is no answer
)

// relayPeer stands in for the new process between A and B: it reads
// batch messages from A before it answers any of them, acts on each as
// decide says (passing it on to B's Adopt over toB, one at a time as the
// previous release's sender does), then writes the batch's answers to A
// in one write; after that first batch it answers each message as it
// reads it. A sender that waits for each answer before it sends the
// next message never gets one. It returns when A's end closes, or after
// a break or a hang; descriptors it kept are closed at the test's end.
func relayPeer(t *testing.T, fromA, toB *net.UnixConn, batch int, decide func(i int) peerAct) <-chan struct{} {
	done := make(chan struct{})
	var mu sync.Mutex
	var kept []handoff.Message
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for i := range kept {
			kept[i].Close()
		}
	})
	go func() {
		defer close(done)
		defer toB.CloseWrite() // B's Adopt returns at EOF
		for i := 0; ; {
			var msgs []handoff.Message
			for range batch {
				m, err := handoff.Receive(fromA)
				if err != nil {
					break
				}
				msgs = append(msgs, m)
			}
			if len(msgs) == 0 {
				return
			}
			var acks []byte
			for j := range msgs {
				m := &msgs[j]
				switch decide(i) {
				case peerPass:
					if err := handoff.Send(toB, m.Bytes, m.FDs[0], m.FDs[1]); err != nil {
						t.Errorf("relay to B: %v", err)
						return
					}
					m.Close()
					ok, err := handoff.ReadAck(toB)
					if err != nil {
						t.Errorf("relay: B's answer: %v", err)
						return
					}
					acks = append(acks, map[bool]byte{true: handoff.AckAdopted, false: handoff.AckRefused}[ok])
				case peerGarble:
					if err := handoff.Send(toB, m.Bytes, m.FDs[0], m.FDs[1]); err != nil {
						t.Errorf("relay to B: %v", err)
						return
					}
					m.Close()
					if _, err := handoff.ReadAck(toB); err != nil {
						t.Errorf("relay: B's answer: %v", err)
						return
					}
					acks = append(acks, 0x7f)
				case peerRefuse:
					m.Close()
					acks = append(acks, handoff.AckRefused)
				case peerBreak:
					fromA.Write(acks)
					for k := j; k < len(msgs); k++ {
						msgs[k].Close()
					}
					fromA.Close()
					return
				case peerHang:
					mu.Lock()
					kept = append(kept, msgs[j:]...)
					mu.Unlock()
					fromA.Write(acks)
					return
				}
				i++
			}
			if _, err := fromA.Write(acks); err != nil {
				t.Errorf("relay: answers to A: %v", err)
				return
			}
			// From now on each message is answered as it is read, as
			// Adopt does: a connection busy in A's first round comes alone
			// in a later one, and must not wait for a batch to fill.
			batch = 1
		}
	}()
	return done
}

// relayed is a pair whose hand-off goes through relayPeer, with n plain
// WebSockets in A, each read by a goroutine of its own that reports what
// it gets: a close code (an unmoved connection's 1012) or "echo".
type relayed struct {
	*pair
	cs    []*websocket.Conn
	got   chan string // per client event: "echo" or "close 1012"
	adopt chan int
}

func startRelayed(t *testing.T, n int) *relayed {
	be := startBackend(t, "b1")
	r := &relayed{pair: startPair(t, be.Addr(), nil, edgeConfig{}), got: make(chan string, 2*n), adopt: make(chan int, 1)}
	for range n {
		c, _ := r.a.dialWS(t, "/", nil)
		testkit.Ask(t, c, "before")
		r.cs = append(r.cs, c)
		go func() {
			for {
				_, b, err := c.ReadMessage()
				var ce *websocket.CloseError
				switch {
				case errors.As(err, &ce):
					c.Close() // the close handshake is done: A's socket ends now
					r.got <- fmt.Sprintf("close %d", ce.Code)
					return
				case err != nil:
					r.got <- "error " + err.Error()
					return
				}
				r.got <- string(b)
			}
		}()
	}
	return r
}

// relay starts B's Adopt and a relayPeer in front of it, and returns
// both ends of the socket from A to the relay (ra is A's) and the
// relay's done.
func (r *relayed) relay(t *testing.T, batch int, decide func(i int) peerAct) (ra, rb *net.UnixConn, done <-chan struct{}) {
	t.Helper()
	ra, rb = testkit.UnixPair(t)  // A to the relay
	fb, ub := testkit.UnixPair(t) // the relay to B
	go func() {
		n, err := r.b.srv.Adopt(context.Background(), ub)
		if err != nil {
			t.Errorf("Adopt: %v", err)
		}
		r.adopt <- n
	}()
	return ra, rb, relayPeer(t, rb, fb, batch, decide)
}

// run hands A's connections off through a relayPeer and returns A's
// results. ctx's bound is far beyond what the hand-off needs; it only
// keeps a sender that waits for each answer from hanging the test.
func (r *relayed) run(t *testing.T, batch int, decide func(i int) peerAct) (moved, closed int, err error) {
	t.Helper()
	ra, _, relay := r.relay(t, batch, decide)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	moved, closed, err = r.a.srv.Handoff(ctx, ra, 100*time.Millisecond)
	if ctx.Err() != nil {
		t.Errorf("the hand-off ran until its context ended: %v", err)
	}
	ra.CloseWrite()
	<-relay
	return moved, closed, err
}

// after sends "after" on every client and counts the answers and the
// 1012s: each client answers exactly once, with one or the other.
func (r *relayed) after(t *testing.T) (echoed, restarted int) {
	t.Helper()
	for _, c := range r.cs {
		c.WriteMessage(websocket.TextMessage, []byte("after"))
	}
	for range r.cs {
		switch ev := r.next(t); ev {
		case "after":
			echoed++
		case "close 1012":
			restarted++
		default:
			t.Errorf("a client got %q", ev)
		}
	}
	return echoed, restarted
}

// next is the next event at a client.
func (r *relayed) next(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-r.got:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatalf("no event at any of %d clients for 30 s", len(r.cs))
		return ""
	}
}

// TestHandoffPipelined: a peer that reads 8 messages before it answers
// any (as a sender that keeps messages in flight may expect) gets all 24
// connections: Handoff does not wait for each answer before sending the
// next. Every client then echoes through B.
func TestHandoffPipelined(t *testing.T) {
	const n, batch = 24, 8
	r := startRelayed(t, n)
	moved, closed, err := r.run(t, batch, func(int) peerAct { return peerPass })
	if err != nil || moved != n || closed != 0 {
		t.Fatalf("moved %d closed %d (%v), want %d 0", moved, closed, err, n)
	}
	if got := <-r.adopt; got != n {
		t.Fatalf("B adopted %d, want %d", got, n)
	}
	if echoed, restarted := r.after(t); echoed != n || restarted != 0 {
		t.Fatalf("%d echoed, %d got 1012, want %d 0", echoed, restarted, n)
	}
	if got := r.a.srv.Active(); got != 0 {
		t.Errorf("A holds %d", got)
	}
}

// TestHandoffPipelinedRefused: the messages a peer refuses, among
// others it takes in the same batch, stay in A and get their 1012 there;
// the others move.
func TestHandoffPipelinedRefused(t *testing.T) {
	const n, batch = 16, 8
	r := startRelayed(t, n)
	moved, closed, err := r.run(t, batch, func(i int) peerAct {
		if i%5 == 2 { // 2, 7, 12
			return peerRefuse
		}
		return peerPass
	})
	if err != nil || moved != n-3 || closed != 3 {
		t.Fatalf("moved %d closed %d (%v), want %d 3", moved, closed, err, n-3)
	}
	if got := <-r.adopt; got != n-3 {
		t.Fatalf("B adopted %d, want %d", got, n-3)
	}
	if echoed, restarted := r.after(t); echoed != n-3 || restarted != 3 {
		t.Fatalf("%d echoed, %d got 1012, want %d 3", echoed, restarted, n-3)
	}
}

// TestHandoffPipelinedBroken: a peer that answers 5 messages of a
// batch and then closes the socket, with more in flight: the 5 move, and
// every other connection, sent or not, stays in A (none runs in both)
// and gets its 1012 there.
func TestHandoffPipelinedBroken(t *testing.T) {
	const n, batch, took = 16, 8, 5
	r := startRelayed(t, n)
	moved, closed, err := r.run(t, batch, func(i int) peerAct {
		if i < took {
			return peerPass
		}
		return peerBreak
	})
	if err == nil || moved != took || closed != n-took {
		t.Fatalf("moved %d closed %d (%v), want %d %d and an error", moved, closed, err, took, n-took)
	}
	if got := <-r.adopt; got != took {
		t.Fatalf("B adopted %d, want %d", got, took)
	}
	if echoed, restarted := r.after(t); echoed != took || restarted != n-took {
		t.Fatalf("%d echoed, %d got 1012, want %d %d", echoed, restarted, took, n-took)
	}
}

// TestHandoffPeerStalls: a peer that reads messages and then answers
// nothing ends the hand-off at the stall bound while its context still
// runs. Every connection in flight then may be running in the peer: A
// gives each up (closed without a write, observed as moved), resumes
// none, and says the peer stalled.
func TestHandoffPeerStalls(t *testing.T) {
	const n, batch = 16, 8
	r := startRelayed(t, n)
	r.a.srv.testHandoff = &handoffHooks{sender: handoff.Options{Stall: 200 * time.Millisecond}}
	moved, closed, err := r.run(t, batch, func(int) peerAct { return peerHang })
	// A connection busy in the first round (its runner still held after
	// the echo) is not sent before the stall, and gets its 1012 in A.
	if !errors.Is(err, handoff.ErrStalled) || moved == 0 || moved+closed != n {
		t.Fatalf("moved %d closed %d (%v), want %d in all, moved ones, and the stall", moved, closed, err, n)
	}
	r.observedMoved(t, moved)
}

// observedMoved waits until A holds none and checks that A's Observer
// saw every connection close, moved of them as moved.
func (r *relayed) observedMoved(t *testing.T, moved int) {
	t.Helper()
	testkit.WaitFor(t, "A holding none", func() bool { return r.a.srv.Active() == 0 })
	r.a.obs.mu.Lock()
	defer r.a.obs.mu.Unlock()
	if len(r.a.obs.closed) != len(r.cs) {
		t.Fatalf("A observed %d closes, want %d", len(r.a.obs.closed), len(r.cs))
	}
	given := 0
	for _, why := range r.a.obs.closed {
		if why == string(ReasonMoved) {
			given++
		}
	}
	if given != moved {
		t.Fatalf("A observed %d closes as %q, want the %d given up", given, ReasonMoved, moved)
	}
}

// TestHandoffThousands: 2,500 connections, many windows' worth, move in
// one hand-off, every one of them: A holds none, B all, each counted on
// B's backend, and every client still echoes.
func TestHandoffThousands(t *testing.T) {
	const n = 2500
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{})
	cs := make([]*websocket.Conn, n)
	for i := range cs {
		cs[i], _ = pr.a.dialWS(t, "/", nil)
	}
	testkit.WaitFor(t, "every connection in A", func() bool { return pr.a.srv.Active() == n })
	moved, closed, adopted := pr.handoff(t, time.Second)
	if moved != n || closed != 0 || adopted != n {
		t.Fatalf("moved %d closed %d adopted %d, want %d 0 %d", moved, closed, adopted, n, n)
	}
	if a, b := pr.a.srv.Active(), pr.b.srv.Active(); a != 0 || b != n {
		t.Fatalf("A holds %d, B %d, want 0 %d", a, b, n)
	}
	if got := pr.poolB.Balancer.Snapshot().ByID("b1").Active(); got != n {
		t.Fatalf("B's backend count %d, want %d", got, n)
	}
	for i, c := range cs {
		if got := testkit.Ask(t, c, "after"); got != "after" {
			t.Fatalf("client %d after the hand-off: %q", i, got)
		}
	}
}

// TestHandoffLatePeerKeepsGivenUp: a peer that reads nothing until A has
// given up at the stall bound and closed its end (the old process exits)
// still finds A's messages queued on the socket. A gave each of those
// connections up as moved, so the peer is their only holder: it must
// keep them although its answers can no longer be written, or they end
// with neither a 1012 nor a process to run them.
func TestHandoffLatePeerKeepsGivenUp(t *testing.T) {
	const n = 8
	r := startRelayed(t, n)
	r.a.srv.testHandoff = &handoffHooks{sender: handoff.Options{Stall: 200 * time.Millisecond}}
	ua, ub := testkit.UnixPair(t)
	moved, closed, err := r.a.srv.Handoff(context.Background(), ua, 100*time.Millisecond)
	// One busy in the first round is not sent, and gets its 1012 in A.
	if !errors.Is(err, handoff.ErrStalled) || moved == 0 || moved+closed != n {
		t.Fatalf("moved %d closed %d (%v), want %d in all, moved ones, and the stall", moved, closed, err, n)
	}
	ua.Close() // the old process is gone
	got, err := r.b.srv.Adopt(context.Background(), ub)
	if got != moved {
		t.Fatalf("B adopted %d (%v), want the %d A gave up", got, err, moved)
	}
	if echoed, restarted := r.after(t); echoed != moved || restarted != closed {
		t.Fatalf("%d echoed, %d got 1012, want %d %d", echoed, restarted, moved, closed)
	}
}

// TestHandoffUnknownAnswer: a peer whose answer to one message of a
// window is no answer this release knows (another release's) while it
// adopted that one and every other: A must not resume any of them, for
// each may run in the peer. The answers read with the unknown one are
// acted on, the unknown one and those still in flight are given up, and
// no client gets A's 1012 while B runs its connection.
func TestHandoffUnknownAnswer(t *testing.T) {
	const n, batch = 8, 8
	r := startRelayed(t, n)
	moved, closed, err := r.run(t, batch, func(i int) peerAct {
		if i == 3 {
			return peerGarble
		}
		return peerPass
	})
	if err == nil || moved+closed != n {
		t.Fatalf("moved %d closed %d (%v), want %d in all and an error", moved, closed, err, n)
	}
	adopted := <-r.adopt
	if adopted != moved {
		t.Fatalf("B adopted %d, A gave up %d: some run in both", adopted, moved)
	}
	if echoed, restarted := r.after(t); echoed != moved || restarted != closed {
		t.Fatalf("%d echoed, %d got 1012, want %d %d", echoed, restarted, moved, closed)
	}
}

// TestHandoffRefusedAtStall: the peer refused the first messages of a
// window, and its answers wait unread on the socket when the stall bound
// passes (A is sending: its send buffer is small here, so it blocks).
// Go's Read returns at a passed deadline without reading what is queued,
// yet those answers are there: each refused connection stays in A and
// gets its close 1012 there (RFC 6455 §7.4.1), and only the connections
// the peer holds unanswered are given up as moved.
func TestHandoffRefusedAtStall(t *testing.T) {
	refusedAtDeadline(t, func(_ context.CancelFunc, ra *net.UnixConn) {
		// What the sender sets when the stall bound passes.
		ra.SetDeadline(aLongTimeAgo)
	})
}

// TestHandoffRefusedAtEnd: the same when the hand-off's context ends
// instead. What is left then is closed as Drain does at its deadline,
// so only the counts are asserted: the refused connections are not
// counted moved.
func TestHandoffRefusedAtEnd(t *testing.T) {
	refusedAtDeadline(t, func(cancel context.CancelFunc, _ *net.UnixConn) { cancel() })
}

// refusedAtDeadline hands 32 connections off to a relayPeer that
// refuses the first 4 messages and keeps the 5th unanswered, reading
// nothing more; once its answers are written, end makes the hand-off's
// deadline pass.
func refusedAtDeadline(t *testing.T, end func(cancel context.CancelFunc, ra *net.UnixConn)) {
	const n, refused = 32, 4
	r := startRelayed(t, n)
	ra, rb, relay := r.relay(t, refused+1, func(i int) peerAct {
		if i < refused {
			return peerRefuse
		}
		return peerHang
	})
	smallSendBuffer(t, ra)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		moved, closed int
		err           error
	}
	done := make(chan result, 1)
	go func() {
		moved, closed, err := r.a.srv.Handoff(ctx, ra, 100*time.Millisecond)
		done <- result{moved, closed, err}
	}()
	<-relay // the answers are queued, and the peer reads no more
	end(cancel, ra)
	res := <-done
	if res.err == nil || !errors.Is(res.err, os.ErrDeadlineExceeded) {
		t.Fatalf("Handoff: %v, want the deadline", res.err)
	}
	held := 1 + unread(t, ra, rb) // the one the relay kept, and what it never read
	if res.moved != held || res.closed != n-held {
		t.Fatalf("moved %d closed %d, want the %d the peer holds unanswered moved and %d closed (%d refused)",
			res.moved, res.closed, held, n-held, refused)
	}
	if ctx.Err() == nil {
		for range res.closed {
			if ev := r.next(t); ev != "close 1012" {
				t.Fatalf("a client A kept got %q, want close 1012", ev)
			}
		}
	}
	r.observedMoved(t, res.moved)
	if got := <-r.adopt; got != 0 {
		t.Fatalf("B adopted %d, want none: the relay passed nothing on", got)
	}
}

// smallSendBuffer gives c the smallest send buffer the kernel allows:
// a sender blocks once a few messages wait unread.
func smallSendBuffer(t *testing.T, c *net.UnixConn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 1)
	}); err != nil || serr != nil {
		t.Fatalf("SO_SNDBUF: %v %v", err, serr)
	}
}

// unread counts the messages A sent that were never read from rb (A's
// end, ra, is shut for writing first). Their descriptors are kept open
// until the test ends, as the peer holding them would.
func unread(t *testing.T, ra, rb *net.UnixConn) int {
	t.Helper()
	ra.CloseWrite()
	n := 0
	for {
		m, err := handoff.Receive(rb)
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatalf("the messages left: %v", err)
		}
		n++
		t.Cleanup(m.Close)
	}
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/bench/internal/wire"
	"github.com/edgelb/edge/internal/testbackend"
)

var clients = []string{clientGorilla, clientGobwas}

// harness runs one generator against an in-process wss echo server: the
// backend's handler behind a TLS listener stands in for the proxy.
type harness struct {
	t *testing.T
	// accepted and read count the server's connections and the bytes it
	// read from them, so a test can await traffic instead of sleeping.
	accepted, read *atomic.Int64

	events chan wire.Event
	cmds   chan string
	done   chan error
	cancel context.CancelFunc
	// drop closes every connection the server accepted so far.
	drop func()
}

func startGen(t *testing.T, c config) *harness {
	t.Helper()
	be, err := testbackend.Start("b1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	srv := httptest.NewUnstartedServer(be)
	cl := &countingListener{Listener: srv.Listener, accepted: new(atomic.Int64), read: new(atomic.Int64)}
	t.Cleanup(cl.closeAll)
	srv.Listener = cl
	srv.StartTLS()
	t.Cleanup(srv.Close)

	c.target, c.host, c.path = srv.Listener.Addr().String(), "localhost", "/echo"
	c.srcBase, c.srcCount = netip.MustParseAddr("127.0.0.2"), 2
	c.timeout = 5 * time.Second
	if c.dialConc == 0 {
		c.dialConc = 2
	}
	if c.bigConc == 0 {
		c.bigConc = 2
	}
	g := newGen(c)
	pr, pw := io.Pipe()
	g.out = json.NewEncoder(pw)
	h := &harness{t: t, accepted: cl.accepted, read: cl.read, events: make(chan wire.Event, 8), cmds: make(chan string), done: make(chan error, 1), drop: cl.closeAll}
	go func() {
		dec := json.NewDecoder(pr)
		for {
			var e wire.Event
			if dec.Decode(&e) != nil {
				close(h.events)
				return
			}
			h.events <- e
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- g.run(ctx, h.cmds) }()
	t.Cleanup(func() {
		cancel()
		_ = pw.Close()
	})
	return h
}

func (h *harness) next(want string) wire.Event {
	h.t.Helper()
	select {
	case e, ok := <-h.events:
		if !ok || e.Event != want {
			h.t.Fatalf("event %+v (open %v), want %q", e, ok, want)
		}
		return e
	case <-time.After(10 * time.Second):
		h.t.Fatalf("no %q event", want)
	}
	return wire.Event{}
}

// await polls cond for at most ten seconds.
func (h *harness) await(what string, cond func() bool) {
	h.t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			h.t.Fatalf("timed out awaiting %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingListener counts accepted connections and the bytes read from
// them, and keeps them for closeAll.
type countingListener struct {
	net.Listener
	accepted, read *atomic.Int64
	mu             sync.Mutex
	conns          []net.Conn
}

// closeAll closes every connection accepted so far, as a proxy that dies
// does (http.Server does not track hijacked ones).
func (l *countingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return countingConn{Conn: c, read: l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Fatal(err)
	}
}

// TestIdleEcho holds connections in idle mode, with each client, and checks
// that the echo command exercises every one of them while they are held.
// With -big every connection first echoes a message larger than the read
// scratch and than one write buffer, so it streams through both.
func TestIdleEcho(t *testing.T) {
	for _, client := range clients {
		for _, big := range []int{0, 3*bigScratch + 7} {
			t.Run(client+"/big="+strconv.Itoa(big), func(t *testing.T) {
				h := startGen(t, config{mode: "idle", client: client, conns: 5, size: 100, big: big})
				if e := h.next(wire.EventReady); e.Conns != 5 || e.Errors != 0 {
					t.Fatalf("ready %+v, want 5 connections and no errors", e)
				}
				h.cmds <- wire.CmdEcho
				if e := h.next(wire.EventEchoed); e.Conns != 5 || e.Messages != 5 || e.Errors != 0 {
					t.Fatalf("echoed %+v, want 5 of 5", e)
				}
				// After the measured window too.
				h.cmds <- wire.CmdStart
				h.cmds <- wire.CmdStop
				h.next(wire.EventResult)
				h.cmds <- wire.CmdEcho
				if e := h.next(wire.EventEchoed); e.Messages != 5 {
					t.Fatalf("echoed after the window %+v, want 5", e)
				}
				h.stop()
			})
		}
	}
}

// TestLoopModes runs the closed-loop and fixed-rate echo with each client
// and checks that messages come back without errors.
func TestLoopModes(t *testing.T) {
	for _, client := range clients {
		for _, mode := range []string{"echo", "rate"} {
			t.Run(client+"/"+mode, func(t *testing.T) {
				h := startGen(t, config{mode: mode, client: client, conns: 3, size: 5000, rate: 50})
				if e := h.next(wire.EventReady); e.Conns != 3 || e.Errors != 0 {
					t.Fatalf("ready %+v, want 3 connections and no errors", e)
				}
				base := h.read.Load()
				h.cmds <- wire.CmdStart
				// Three more messages per connection reached the server.
				h.await("messages", func() bool { return h.read.Load() >= base+9*5000 })
				h.cmds <- wire.CmdStop
				e := h.next(wire.EventResult)
				if e.Errors != 0 || e.Conns != 3 || e.Messages < 3 {
					t.Fatalf("result %+v, want 3 connections, messages and no errors", e)
				}
				h.stop()
			})
		}
	}
}

// TestConnectModes runs the connect loops with each client, with full and
// resumed handshakes, and checks the resumption counts.
func TestConnectModes(t *testing.T) {
	for _, client := range clients {
		for _, resume := range []bool{false, true} {
			t.Run(client+"/resume="+map[bool]string{false: "false", true: "true"}[resume], func(t *testing.T) {
				h := startGen(t, config{mode: "connect", client: client, workers: 2, size: 100, resume: resume})
				if e := h.next(wire.EventReady); e.Errors != 0 {
					t.Fatalf("ready %+v, want no errors", e)
				}
				base := h.accepted.Load()
				h.cmds <- wire.CmdStart
				// Two rounds of every worker after the warm-up.
				h.await("connections", func() bool { return h.accepted.Load() >= base+6 })
				h.cmds <- wire.CmdStop
				e := h.next(wire.EventResult)
				if e.Errors != 0 || e.Ops == 0 {
					t.Fatalf("result %+v, want operations and no errors", e)
				}
				if !resume && e.Resumed != 0 {
					t.Fatalf("result %+v: resumed without a ticket cache", e)
				}
				if resume && e.Resumed != e.Ops {
					t.Fatalf("result %+v: want every connection resumed", e)
				}
				h.stop()
			})
		}
	}
}

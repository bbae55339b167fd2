package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/gorilla/websocket"
)

// TestRestAfterEveryQuiet: the sweeper drops a quiet connection's
// ciphers, a message rebuilds them, and the next quiet drops them again.
// While it rests the connection has no deadline of its rest, so the
// sweeper skips it; the message's run is what makes it due again.
func TestRestAfterEveryQuiet(t *testing.T) {
	e := recordEdge(t)
	c, _ := e.dialWS(t, "/", nil)
	defer c.Close()
	for i := range 3 {
		testkit.WaitFor(t, "the quiet connection to drop its ciphers", func() bool { return e.srv.restedConns() == 1 })
		if got := testkit.Ask(t, c, "again"); got != "again" {
			t.Fatalf("echo %d after a rest: %q", i, got)
		}
	}
}

// TestHeartbeatRests: the runs of a held connection's heartbeat, edge's
// ping written and the client's pong to it consumed, leave its ciphers
// dropped themselves: the sweeper's rest here waits an hour. The client
// is gorilla's, answering the pings from its read loop, and is pinged
// after 1.5 s of silence, longer than a run's rest asks for (restAfter).
// A message after the heartbeat still reaches the backend, and the run
// that carried it leaves the ciphers built.
func TestHeartbeatRests(t *testing.T) {
	e, backend := pongEdge(t, spliceReadiness, 1500*time.Millisecond, nil, 1<<20)
	e.srv.testRestAfter.Store(int64(time.Hour))
	c, _ := e.dialWS(t, "/", nil)
	defer c.Close()
	go readAll(c)
	testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
	for i := range 2 {
		if err := c.WriteMessage(websocket.TextMessage, []byte("data")); err != nil {
			t.Fatal(err)
		}
		wantFrame(t, backend, wswire.OpText, "data")
		testkit.WaitFor(t, "the message's run to leave the ciphers built", func() bool { return e.srv.restedConns() == 0 })
		pinged := e.obs.pingsSent()
		testkit.WaitFor(t, fmt.Sprintf("heartbeat %d to leave the connection resting", i), func() bool {
			return e.obs.pingsSent() > pinged && e.srv.restedConns() == 1
		})
	}
}

// TestPushStreamKeepsCiphers: a client that never writes is pinged while
// its backend streams to it; the stream's runs keep the connection from
// being quiet, so the heartbeat's runs leave its ciphers built.
func TestPushStreamKeepsCiphers(t *testing.T) {
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, resp := testkit.ReadUpgrade(t, br)
		io.WriteString(c, resp)
		// A push stream: a frame every 20 ms until the connection ends.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if _, err := c.Write(serverFrame(wswire.OpText, true, []byte("tick"))); err != nil {
				return
			}
		}
	})
	p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
	p.PingInterval, p.PingTimeout, p.MaxFrameBytes = 100*time.Millisecond, time.Minute, 1<<20
	e := startEdge(t, edgeConfig{splice: spliceReadiness, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	e.srv.testRestAfter.Store(int64(time.Hour))
	c, _ := e.dialWS(t, "/", nil)
	defer c.Close()
	go readAll(c)
	testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
	testkit.WaitFor(t, "three heartbeats", func() bool {
		if n := e.srv.restedConns(); n != 0 {
			t.Fatalf("the streamed-to connection rested after %d pings", e.obs.pingsSent())
		}
		return e.obs.pingsSent() >= 3
	})
}

// readAll reads c until it fails, which answers the pings it reads
// (gorilla's default ping handler).
func readAll(c *websocket.Conn) {
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			return
		}
	}
}

// TestWriteTimeoutAfterRest: a connection that rested, so that nothing
// of it is due for an hour (its idle timeout), and only then gets a
// queue its client does not take, is closed at the queue's write
// timeout: the runs that built the queue make it due.
func TestWriteTimeoutAfterRest(t *testing.T) {
	flood := make(chan struct{})
	addr := floodingBackend(t, flood)
	p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
	p.WriteTimeout = 300 * time.Millisecond
	p.IdleTimeout = time.Hour
	e := startEdge(t, edgeConfig{splice: spliceReadiness, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	c := e.rawConn(t)
	io.WriteString(c, testkit.RawUpgrade("/", "x"))
	testkit.Read101(t, c)
	testkit.WaitFor(t, "the quiet connection to rest", func() bool { return e.srv.restedConns() == 1 })
	close(flood)
	// The client reads nothing more.
	if got, want := e.obs.waitClosed(t), "write_timeout"; got != want {
		t.Fatalf("reason: got %q, want %q", got, want)
	}
}

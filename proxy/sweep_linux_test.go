package proxy

import (
	"io"
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
// is gorilla's, answering the pings from its read loop; a message after
// the heartbeat still reaches the backend (the ciphers rebuilt).
func TestHeartbeatRests(t *testing.T) {
	e, backend := pongEdge(t, spliceReadiness, 50*time.Millisecond, nil, 1<<20)
	e.srv.testRestAfter.Store(int64(time.Hour))
	c, _ := e.dialWS(t, "/", nil)
	defer c.Close()
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
	testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
	pinged := e.obs.pingsSent()
	testkit.WaitFor(t, "a heartbeat to leave the connection resting", func() bool {
		return e.obs.pingsSent() > pinged && e.srv.restedConns() == 1
	})
	if err := c.WriteMessage(websocket.TextMessage, []byte("after")); err != nil {
		t.Fatal(err)
	}
	wantFrame(t, backend, wswire.OpText, "after")
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

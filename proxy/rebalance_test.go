package proxy

import (
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
)

// TestRebalanceClosesOlderConns: Rebalance asks at most n connections of
// the backend, only those opened before the given moment, to close with
// 1012, and leaves the rest.
func TestRebalanceClosesOlderConns(t *testing.T) {
	b := startBackend(t, "b1")
	p := newPool(t, "app", balance.LeastConn, map[string]string{"b1": b.Addr()})
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	be := p.Balancer.Snapshot().Backends[0]
	var conns []interface{ ReadMessage() (int, []byte, error) }
	for range 3 {
		c, _, err := e.dialer().Dial(e.url("/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	testkit.WaitFor(t, "three registered", func() bool { return e.srv.Active() == 3 })
	if n := e.srv.Rebalance(be, 5, time.Now().Add(-time.Hour), time.Second); n != 0 {
		t.Fatalf("asked %d connections younger than the cut", n)
	}
	if n := e.srv.Rebalance(be, 2, time.Now(), time.Second); n != 2 {
		t.Fatalf("asked %d, want 2", n)
	}
	if n := e.srv.Rebalance(be, 2, time.Now(), time.Second); n != 1 {
		t.Fatalf("asked %d more, want the 1 not yet asked", n)
	}
	for i, c := range conns {
		if _, _, err := c.ReadMessage(); closeCodeOf(err) != CloseServiceRestart {
			t.Fatalf("connection %d: %v, want close 1012", i, err)
		}
	}
	testkit.WaitFor(t, "every reason recorded", func() bool { return e.obs.closedCount() == 3 })
}

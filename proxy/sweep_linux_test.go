package proxy

import (
	"testing"

	"github.com/edgelb/edge/internal/testkit"
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

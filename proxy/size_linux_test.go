package proxy

import (
	"reflect"
	"testing"

	"github.com/edgelb/edge/auth"
)

// TestHeldSizes keeps what an idle held connection keeps on the heap
// within its size class: every one of up to 100,000 connections a box
// holds pays for a field more with the next class.
func TestHeldSizes(t *testing.T) {
	for _, c := range []struct {
		v   any
		max uintptr
	}{
		{exchange{}, 352},
		// Its place in the registry in the last word's spare half.
		{wsConn{}, 320},
		{readyState{}, 64},
		// The accepted conn, with the client's address as a value.
		{edgeConn{}, 128},
		// What a connection opened with a token keeps of it (wsConn.who;
		// nil without a token, so a pool without tokens pays nothing).
		{auth.Mark{}, 24},
	} {
		if n := reflect.TypeOf(c.v).Size(); n > c.max {
			t.Errorf("%T is %d bytes, want at most %d", c.v, n, c.max)
		}
	}
}

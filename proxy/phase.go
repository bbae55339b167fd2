package proxy

import (
	"context"
	"sync/atomic"
)

// WaitHTTPPhase waits until no client socket counted in conns is in its
// HTTP phase (a TLS handshake, a request, an upgrade being set up): each
// is a live WebSocket or closed. It returns ctx's error if ctx ends first.
// The old process of an upgrade calls it after it stopped accepting and
// turned keep-alives off, before http.Server.Shutdown, which would drop a
// request read after it began. It wakes when a socket closes or a
// WebSocket goes live, never on a clock.
func (s *Server) WaitHTTPPhase(ctx context.Context, conns ...*ListenerConns) error {
	// Armed before the first count, so an event between the count and the
	// wait leaves its wake-up in the channel.
	wake := make(chan struct{}, 1)
	for _, n := range conns {
		n.closed.arm(wake)
	}
	s.reg.added.arm(wake)
	for {
		var open int64
		for _, n := range conns {
			open += n.Open()
		}
		if open <= int64(s.Active()) {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waker wakes the waiter that armed it, without blocking the one that
// pokes; the zero value wakes nobody.
type waker struct{ ch atomic.Pointer[chan struct{}] }

// arm makes every later poke wake ch (buffered: a poke before the wait is
// not lost).
func (w *waker) arm(ch chan struct{}) { w.ch.Store(&ch) }

// poke wakes the armed waiter, if any.
func (w *waker) poke() {
	if p := w.ch.Load(); p != nil {
		select {
		case *p <- struct{}{}:
		default:
		}
	}
}

package proxy

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
)

// registry holds every live upgraded connection. http.Server.Shutdown does
// not know hijacked connections (traefik#3630): draining them is ours.
type registry struct {
	mu sync.Mutex
	// conns lists the registered connections, each knowing its place
	// (wsConn.reg): 8 bytes a connection, where a map took about 32.
	conns    []*wsConn
	empty    chan struct{} // closed when conns becomes empty; nil if nobody waits
	closed   bool          // no new registrations
	draining bool
	window   time.Duration
	// The close a connection registered during a drain gets: 1001 for
	// Drain, 1012 for Handoff (0: Drain's).
	code int
	why  CloseReason
	// added wakes a WaitHTTPPhase: a socket leaves its HTTP phase when
	// its WebSocket is registered.
	added waker
}

// has reports whether c is registered; the lock is held.
func (g *registry) has(c *wsConn) bool {
	return c.reg > 0 && int(c.reg) <= len(g.conns) && g.conns[c.reg-1] == c
}

// add registers c; it reports false once the registry is closed.
func (g *registry) add(c *wsConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns = append(g.conns, c)
	c.reg = int32(len(g.conns))
	if c.who != nil && c.s.revoked.Load().Revoked(*c.who) {
		// Revoked while it was being set up (its backend answering, or
		// on its way from another process): SetRevoked did not see it.
		if c.timer == nil {
			c.timer = time.AfterFunc(0, func() { c.revoke(time.Now().UnixNano()) })
		}
	}
	if g.draining {
		// Registered while a drain is under way: schedule it like the rest.
		code, why := CloseGoingAway, ReasonDrain
		if g.code != 0 {
			code, why = g.code, g.why
		}
		c.scheduleCloseLocked(g.window, code, why)
	}
	if until, ok := c.be.Draining(); ok {
		// Its backend left while this connection was being set up (it was
		// picked before the pool changed): it goes like the others, within
		// what is left of their window.
		c.scheduleCloseLocked(max(time.Until(until), 0), CloseServiceRestart, reasonBackendGone)
	}
	g.added.poke()
	return true
}

func (g *registry) remove(c *wsConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.has(c) {
		// The last one takes c's place.
		last := g.conns[len(g.conns)-1]
		g.conns[c.reg-1], last.reg = last, c.reg
		g.conns[len(g.conns)-1] = nil
		g.conns = g.conns[:len(g.conns)-1]
		c.reg = 0
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if len(g.conns) == 0 && g.empty != nil {
		close(g.empty)
		g.empty = nil
	}
}

// wait blocks until no connection is registered or ctx ends.
func (g *registry) wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		if len(g.conns) == 0 {
			g.mu.Unlock()
			return nil
		}
		if g.empty == nil {
			g.empty = make(chan struct{})
		}
		ch := g.empty
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// appendAll appends every registered connection to buf, so that callers
// can act on them without the lock (closing one takes it).
func (g *registry) appendAll(buf []*wsConn) []*wsConn {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append(buf, g.conns...)
}

func (g *registry) each(f func(c *wsConn)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		f(c)
	}
}

// Active returns the number of live upgraded connections.
func (s *Server) Active() int {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	return len(s.reg.conns)
}

// ClosePending returns the number of live WebSockets that were asked to
// close (a drain's 1001, a departed backend's 1012) and have not ended
// yet: a drain's progress.
func (s *Server) ClosePending() int {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	n := 0
	for _, c := range s.reg.conns {
		if c.timer != nil || c.sess.Requested() {
			n++
		}
	}
	return n
}

// Drain stops the Server gracefully. New requests get 503 with
// "Connection: close" at once. Every live WebSocket is sent a close frame
// with status 1001 (going away) after a random delay in [0, window), so
// clients do not reconnect in one stampede (caddy#5471); the close is
// injected between two backend frames, never inside one, and the client's
// close reply still flows to the backend. Drain returns when every
// connection has ended, or force-closes what is left when ctx ends and
// returns once their goroutines have finished.
func (s *Server) Drain(ctx context.Context, window time.Duration) {
	s.draining.Store(true)
	s.reg.mu.Lock()
	s.reg.draining = true
	s.reg.window = window
	for _, c := range s.reg.conns {
		c.scheduleCloseLocked(window, CloseGoingAway, ReasonDrain)
	}
	s.reg.mu.Unlock()
	if s.reg.wait(ctx) == nil {
		return
	}
	for _, c := range s.reg.appendAll(nil) {
		c.closeBoth(ReasonShutdown)
	}
	s.reg.wait(context.Background())
}

// reasonBackendGone is the close reason of a connection whose backend left.
const reasonBackendGone = ReasonBackendGone

// CloseBackend sends close 1012 (service restart) to every connection
// placed on be, each after a random delay in [0, window) like Drain, so the
// clients of a backend that left reconnect to the others at a bounded rate
// rather than all at once. The close goes between two backend frames, never
// inside one. be is marked draining (balance.Backend.SetDraining) first, so
// a connection to it that is still being set up is closed the same way once
// it registers. Call it for a backend that is no longer in its pool's
// snapshot; it returns how many connections were asked to close.
func (s *Server) CloseBackend(be *balance.Backend, window time.Duration) int {
	be.SetDraining(time.Now().Add(window))
	n := 0
	s.reg.each(func(c *wsConn) {
		if c.be == be {
			c.scheduleCloseLocked(window, CloseServiceRestart, reasonBackendGone)
			n++
		}
	})
	return n
}

// scheduleCloseLocked arms the jittered close request; the registry lock is held.
func (c *wsConn) scheduleCloseLocked(window time.Duration, code int, reason CloseReason) {
	var d time.Duration
	if window > 0 {
		d = rand.N(window)
	}
	c.scheduleCloseAtLocked(d, code, reason)
}

// scheduleCloseAtLocked arms the close request to go after d, unless one
// is armed already; the registry lock is held.
func (c *wsConn) scheduleCloseAtLocked(d time.Duration, code int, reason CloseReason) {
	if c.timer != nil {
		return
	}
	c.timer = time.AfterFunc(d, func() { c.requestClose(code, reason) })
}

// CloseConnsOn is CloseBackend for one *Backend of one pool: an ID may
// name members of several pools (a static backend's ID is its address), and
// an operator drains one of them. The close reason is reason.
func (s *Server) CloseConnsOn(b *balance.Backend, code int, window time.Duration, reason CloseReason) int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if c.be == b {
			c.scheduleCloseLocked(window, code, reason)
			n++
		}
	})
	return n
}

// ConnInfo describes one live WebSocket, for the admin API.
type ConnInfo struct {
	Client   string    // the decided client address
	Listener string    // the listener's name
	Host     string    // the request's Host
	Path     string    // the request's path
	Since    time.Time // when the request arrived
	In, Out  int64     // bytes so far, client to backend and back
	Closing  bool      // a close was requested (drain)
}

// Connections lists the live WebSockets placed on b.
func (s *Server) Connections(b *balance.Backend) []ConnInfo {
	var out []ConnInfo
	s.reg.each(func(c *wsConn) {
		if c.be != b {
			return
		}
		ci := ConnInfo{Host: c.x.host, Path: c.x.path, Since: c.x.start, In: c.in.Load(), Out: c.out.Load(),
			Closing: c.timer != nil || c.sess.Requested()}
		if c.x.id.client.IsValid() {
			ci.Client = c.x.id.client.String()
		}
		if c.x.lo != nil {
			ci.Listener = c.x.lo.Name
		}
		out = append(out, ci)
	})
	return out
}

// handOver is Handoff around its sender, move: new requests are refused
// from the start, like Drain's; move is given every live connection and
// returns how many moved and those left, which get a 1012 spread over
// window (restartClose); then it waits until every connection ended, or
// ctx did (what is left is then closed as Drain does at its deadline).
func (s *Server) handOver(ctx context.Context, window time.Duration, move func([]*wsConn) (int, []*wsConn, error)) (moved, closed int, err error) {
	s.draining.Store(true)
	s.reg.mu.Lock()
	s.reg.draining, s.reg.window = true, window
	s.reg.code, s.reg.why = CloseServiceRestart, ReasonRestart
	s.reg.mu.Unlock()
	moved, left, err := move(s.reg.appendAll(nil))
	closed = s.restartClose(left, window)
	if s.reg.wait(ctx) != nil {
		for _, c := range s.reg.appendAll(nil) {
			c.closeBoth(ReasonShutdown)
		}
		s.reg.wait(context.Background())
	}
	return moved, closed, err
}

// restartClose schedules a 1012 for each of conns, the i-th of K at
// i*window/K: evenly spread, so reconnects come at K/window per second.
func (s *Server) restartClose(conns []*wsConn, window time.Duration) int {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	h := s.testHandoff
	if h != nil {
		h.plan = h.plan[:0]
	}
	for i, c := range conns {
		d := time.Duration(0)
		if k := len(conns); k > 0 {
			d = window * time.Duration(i) / time.Duration(k)
		}
		if h != nil {
			h.plan = append(h.plan, d)
		}
		if !s.reg.has(c) {
			continue
		}
		if c.timer != nil && c.timer.Stop() {
			// A close scheduled for later (a backend's or an operator's
			// window) comes within this window instead; one that already
			// fired stands, the session keeps the first request.
			c.timer = nil
		}
		c.scheduleCloseAtLocked(d, CloseServiceRestart, ReasonRestart)
	}
	return len(conns)
}

// Rebalance asks up to n live WebSockets on b that were opened before
// before to close with 1012 (service restart), spaced evenly over window
// (the rebalancer's tick), between two frames: their clients reconnect and
// the pick places them by the pool's current shares. Only connections
// older than before go, so a client moved in an episode (which reconnects
// as a new connection) is not moved again in it, and none younger than a
// pool's minimum age is; connections already asked to close are left. It
// returns how many were asked.
func (s *Server) Rebalance(b *balance.Backend, n int, before time.Time, window time.Duration) int {
	window = max(window, time.Millisecond)
	asked := 0
	s.reg.each(func(c *wsConn) {
		if asked >= n || c.be != b || !c.x.start.Before(before) || c.timer != nil || c.sess.Requested() {
			return
		}
		// Evenly over the window, not at random: the fleet's closes, and
		// so its clients' reconnects, stay at the budget every second.
		c.scheduleCloseAtLocked(time.Duration(2*asked+1)*window/time.Duration(2*n), CloseServiceRestart, ReasonRebalance)
		asked++
	})
	return asked
}

package upgrade

import (
	"context"
	"log/slog"
	"net"
	"time"
)

// Server is the old process's connections as HandOver moves them: the
// live WebSockets (proxy.Server) and the public listeners, which cmd/edge
// owns.
type Server interface {
	// StopAccepting closes every public listener and waits, until ctx
	// ends, for the HTTP phase of the connections already accepted, so
	// none of them gets the drain's 503.
	StopAccepting(ctx context.Context)
	// Active is how many WebSockets are live.
	Active() int
	// Handoff moves the live WebSockets over to to; those that cannot
	// move are closed with 1012 spread over window.
	Handoff(ctx context.Context, to *net.UnixConn, window time.Duration) (moved, closed int, err error)
	// Drain closes the live WebSockets with 1001 spread over window,
	// until ctx ends.
	Drain(ctx context.Context, window time.Duration)
	// Close closes what is left.
	Close() error
}

// HandOverOptions are HandOver's settings.
type HandOverOptions struct {
	// Window is what a close (1012, or a drain's 1001) is spread over.
	Window time.Duration
	// Timeout (drain.timeout) bounds the stop of accepting and, grown
	// with the count of live WebSockets (handOverBound), the whole
	// hand-over; 0: only ctx does.
	Timeout time.Duration
	// HandedOff, if set, counts a hand-off's result.
	HandedOff func(moved, closed int)
	// Log receives the result; default the Upgrader's.
	Log *slog.Logger
}

// handOverPerConn is what the bound on a hand-over grows by for each
// live WebSocket it moves. A hand-off's time grows with its count: each
// connection costs each process some work of its own on a quiet host
// (BenchmarkHandoff), and on a loaded one it waits for CPU as well
// (docs/BENCHMARKS.md, "the hand-off of many live connections", has both).
// A bound of drain.timeout alone failed such hand-offs for their size
// and closed thousands of live connections that would have moved; 5 ms
// each is over a hundred times the quiet cost, so a hand-off that runs
// out of it is stuck, not large. The hand-off's own bound on progress
// (proxy.Server.Handoff: the new process answers within 10 s) ends a
// stuck one long before.
const handOverPerConn = 5 * time.Millisecond

// handOverBound is how long a whole hand-over of n live WebSockets may
// take, from its start: timeout (drain.timeout, which the closes of what
// cannot move and the drain of what a failed hand-off leaves still get in
// full) and handOverPerConn for each connection. An operator's upgrade
// thus ends in bounded time, known at its start (9,900 connections and
// drain.timeout 30s: 79.5 s), and is not failed by its size. 0: no bound.
func handOverBound(timeout time.Duration, n int) time.Duration {
	if timeout <= 0 {
		return 0
	}
	return timeout + time.Duration(n)*handOverPerConn
}

// within is ctx bounded to d after start; d 0 adds no bound.
func within(ctx context.Context, start time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, start.Add(d))
}

// HandOver is the old process's end of a successful upgrade, once the new
// process serves: srv stops accepting (the new process holds the same
// sockets, so their queues are its to accept), then the live WebSockets
// move to the new process over the hand-off socket; a hand-off that fails
// leaves the rest to a drain (1001), as does an upgrade without a hand-off
// socket (a new process that does not take connections). The stop of
// accepting, and a drain without a hand-off, are bounded by opts.Timeout;
// a hand-off and what follows it by handOverBound from the start, which
// grows with the count of live WebSockets; all of it by ctx. The fleet's
// upgrade slot, if one was taken, is this process's until HandOver returns
// (HandOffDone): the fleet counts it as handing off.
func (u *Upgrader) HandOver(ctx context.Context, srv Server, opts HandOverOptions) {
	defer u.HandOffDone()
	log := opts.Log
	if log == nil && u != nil {
		log = u.log
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	base, cancel := within(ctx, start, opts.Timeout)
	defer cancel()
	srv.StopAccepting(base)
	conn := u.Handoff()
	if conn == nil {
		srv.Drain(base, opts.Window)
		_ = srv.Close()
		log.Info("drained", "left", srv.Active())
		return
	}
	defer conn.Close()
	n := srv.Active()
	ctx, cancelAll := within(ctx, start, handOverBound(opts.Timeout, n))
	defer cancelAll()
	log.Info("handing off", "connections", n, "bound", handOverBound(opts.Timeout, n).String())
	moved, closed, err := srv.Handoff(ctx, conn, opts.Window)
	if opts.HandedOff != nil {
		opts.HandedOff(moved, closed)
	}
	if err != nil {
		log.Error("connection hand-off", "moved", moved, "closed", closed, "err", err)
	}
	if srv.Active() > 0 {
		// Whatever the hand-off left (a failed one) drains as a stop
		// does, within what is left of ctx.
		srv.Drain(ctx, opts.Window)
	}
	_ = srv.Close()
	log.Info("drained", "moved", moved, "closed", closed, "left", srv.Active())
}

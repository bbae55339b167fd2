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
	// HandedOff, if set, counts a hand-off's result.
	HandedOff func(moved, closed int)
	// Log receives the result; default the Upgrader's.
	Log *slog.Logger
}

// HandOver is the old process's end of a successful upgrade, once the new
// process serves: srv stops accepting (the new process holds the same
// sockets, so their queues are its to accept), then the live WebSockets
// move to the new process over the hand-off socket; a hand-off that fails
// leaves the rest to a drain (1001), as does an upgrade without a hand-off
// socket (a new process that does not take connections). Everything is
// bounded by ctx. The fleet's upgrade slot, if one was taken, is this
// process's until HandOver returns (HandOffDone): the fleet counts it as
// handing off.
func (u *Upgrader) HandOver(ctx context.Context, srv Server, opts HandOverOptions) {
	defer u.HandOffDone()
	log := opts.Log
	if log == nil && u != nil {
		log = u.log
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv.StopAccepting(ctx)
	conn := u.Handoff()
	if conn == nil {
		srv.Drain(ctx, opts.Window)
		_ = srv.Close()
		log.Info("drained", "left", srv.Active())
		return
	}
	defer conn.Close()
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

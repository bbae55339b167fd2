package proxy

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// AcceptLimit caps the client sockets open at once through the listeners
// that share it (WrapListenerLimit), and reports their accept errors. At
// the cap a new socket is accepted and closed at once: the client sees its
// connection closed instead of waiting in the kernel's backlog, and the
// descriptors left stay free for the admin listener, backend connections,
// health checks and Consul. Without a cap a process at RLIMIT_NOFILE gets
// EMFILE from every accept, the admin listener's included, and can answer
// no one. A nil *AcceptLimit caps nothing.
type AcceptLimit struct {
	max     int64 // 0 = no cap
	open    atomic.Int64
	refused atomic.Int64

	refusedLog, errLog everySecond
}

// NewAcceptLimit returns a limit of max open client sockets (0 for none)
// whose warnings go to log (nil discards).
func NewAcceptLimit(max int64, log *slog.Logger) *AcceptLimit {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &AcceptLimit{max: max}
	l.refusedLog = everySecond{log: log, now: time.Now}
	l.errLog = everySecond{log: log, now: time.Now}
	return l
}

// Max is the cap, 0 for none.
func (l *AcceptLimit) Max() int64 { return l.max }

// Open is the number of client sockets open now.
func (l *AcceptLimit) Open() int64 { return l.open.Load() }

// Refused is the number of sockets closed at the cap so far.
func (l *AcceptLimit) Refused() int64 { return l.refused.Load() }

func (l *AcceptLimit) take() bool {
	if l == nil {
		return true
	}
	if n := l.open.Add(1); l.max > 0 && n > l.max {
		l.open.Add(-1)
		l.refused.Add(1)
		l.refusedLog.warn("client sockets at the cap: closing new connections", "max", l.max)
		return false
	}
	return true
}

func (l *AcceptLimit) done() {
	if l != nil {
		l.open.Add(-1)
	}
}

// acceptFailed logs an accept error at warn, at most once a second.
// net/http retries temporary errors (EMFILE, ENFILE) with a backoff and
// reports them only to its ErrorLog.
func (l *AcceptLimit) acceptFailed(err error) {
	if l == nil || errors.Is(err, net.ErrClosed) {
		return
	}
	l.errLog.warn("accept failed", "err", err, "open", l.open.Load(), "max", l.max)
}

// everySecond logs a warning at most once a second, with how many were
// suppressed since the last one.
type everySecond struct {
	log        *slog.Logger
	now        func() time.Time
	mu         sync.Mutex
	last       time.Time
	suppressed int64
}

func (e *everySecond) warn(msg string, args ...any) {
	e.mu.Lock()
	now := e.now()
	if !e.last.IsZero() && now.Sub(e.last) < time.Second {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.log.Warn(msg, append(args, "suppressed", n)...)
}

// WrapListenerLimit is WrapListener with the client sockets counted
// against lim from accept until their descriptor is closed (after a
// takeover, when the splice closes its duplicate).
func WrapListenerLimit(l net.Listener, lim *AcceptLimit) net.Listener {
	return &readyListener{Listener: l, lim: lim}
}

//go:build !linux

package proxy

import (
	"context"
	"errors"
	"net"
	"time"
)

// errNoHandoff: connections move only off the readiness-driven splice,
// which is Linux's.
var errNoHandoff = errors.New("proxy: connection hand-off needs Linux")

// Handoff is Linux only (handoff_linux.go); elsewhere it moves nothing:
// every connection gets a 1012 spread over window, and it returns once
// they ended (at ctx's end, what is left is closed as Drain does).
func (s *Server) Handoff(ctx context.Context, to *net.UnixConn, window time.Duration) (moved, closed int, err error) {
	s.draining.Store(true)
	s.reg.mu.Lock()
	s.reg.draining, s.reg.window = true, window
	s.reg.code, s.reg.why = CloseServiceRestart, ReasonRestart
	s.reg.mu.Unlock()
	closed = s.restartClose(s.reg.appendAll(nil), window)
	if s.reg.wait(ctx) != nil {
		for _, c := range s.reg.appendAll(nil) {
			c.closeBoth(ReasonShutdown)
		}
		s.reg.wait(context.Background())
	}
	return 0, closed, errNoHandoff
}

// Adopt is Linux only (handoff_linux.go).
func (s *Server) Adopt(ctx context.Context, from *net.UnixConn) (int, error) {
	return 0, errNoHandoff
}

// moveResult is what one attempt to move a connection came to: here,
// never.
type moveResult int

const moveNever moveResult = 2

// frozen does not exist here: nothing moves.
type frozen struct{}

func (*goDriver) freeze() (*frozen, moveResult) { return nil, moveNever }

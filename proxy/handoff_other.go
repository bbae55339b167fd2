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

// Handoff is Linux only (handoff_linux.go); elsewhere it moves nothing
// and drains every connection with a 1012 like Drain.
func (s *Server) Handoff(ctx context.Context, to *net.UnixConn, window time.Duration) (moved, closed int, err error) {
	n := s.Active()
	s.reg.mu.Lock()
	s.reg.code, s.reg.why = CloseServiceRestart, ReasonRestart
	s.reg.mu.Unlock()
	s.Drain(ctx, window)
	return 0, n, errNoHandoff
}

// Adopt is Linux only (handoff_linux.go).
func (s *Server) Adopt(ctx context.Context, from *net.UnixConn) (int, error) {
	return 0, errNoHandoff
}

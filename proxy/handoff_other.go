//go:build !linux

package proxy

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/edgelb/edge/proxy/internal/handoff"
)

// errNoHandoff: connections move only off the readiness-driven splice,
// which is Linux's.
var errNoHandoff = errors.New("proxy: connection hand-off needs Linux")

// Handoff is Linux only (handoff_linux.go); elsewhere it moves nothing:
// every connection gets a 1012 spread over window, and it returns once
// they ended (at ctx's end, what is left is closed as Drain does).
func (s *Server) Handoff(ctx context.Context, to *net.UnixConn, window time.Duration) (moved, closed int, err error) {
	return s.handOver(ctx, window, func(conns []*wsConn) (int, []*wsConn, error) {
		return 0, conns, errNoHandoff
	})
}

// Adopt is Linux only (handoff_linux.go).
func (s *Server) Adopt(ctx context.Context, from *net.UnixConn) (int, error) {
	return 0, errNoHandoff
}

// frozen does not exist here: nothing moves.
type frozen struct{}

func (*goDriver) freeze() (*frozen, handoff.Result) { return nil, handoff.Never }

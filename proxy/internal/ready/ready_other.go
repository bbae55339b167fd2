//go:build !linux

package ready

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"
)

// errNoSocket reports that sockets cannot be taken over on this platform.
var errNoSocket = errors.New("readiness splice not available on this platform")

// ErrStopped reports a Runtime that is not running: always, here.
var ErrStopped = errors.New("readiness runtime not running")

// Options configure a Runtime.
type Options struct {
	Logger *slog.Logger
	Quiet  func()
}

// Runtime is empty here: every connection is spliced by two goroutines.
type Runtime struct{ started chan struct{} }

// New returns a Runtime that never runs a connection.
func New(Options) *Runtime {
	rt := &Runtime{started: make(chan struct{})}
	close(rt.started)
	return rt
}

// Run waits for ctx: there is nothing to run here.
func (rt *Runtime) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Started is closed at once.
func (rt *Runtime) Started() <-chan struct{} { return rt.started }

// Running is false: no connection is ever added.
func (rt *Runtime) Running() bool { return false }

// NoteTimeout does nothing here.
func (rt *Runtime) NoteTimeout(time.Duration) {}

// Sock is never created here; an accepted conn only delegates.
type Sock struct{}

func (*Sock) Read([]byte) (int, error)  { return 0, errNoSocket }
func (*Sock) Write([]byte) (int, error) { return 0, errNoSocket }
func (*Sock) Close() error              { return errNoSocket }
func (*Sock) CloseWrite() error         { return errNoSocket }
func (*Sock) LocalAddr() net.Addr       { return &net.TCPAddr{} }

//go:build !linux

package proxy

import (
	"errors"
	"net"
)

// errNoSocket reports that sockets cannot be taken over on this platform.
var errNoSocket = errors.New("readiness splice not available on this platform")

// poller does not exist here.
type poller struct{}

// sock is never created here; edgeConn only delegates.
type sock struct{}

func (*sock) read([]byte) (int, error)  { return 0, errNoSocket }
func (*sock) write([]byte) (int, error) { return 0, errNoSocket }
func (*sock) close() error              { return errNoSocket }
func (*sock) closeWrite() error         { return errNoSocket }
func (*sock) localAddr() net.Addr       { return &net.TCPAddr{} }

func (c *wsConn) startReady(_, _, _ []byte) bool { return false }
func (s *Server) stopPoller()                    {}

// recordLayerOn: without the readiness-driven splice crypto/tls keeps
// every record.
const recordLayerOn = false

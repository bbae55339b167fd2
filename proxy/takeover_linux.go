package proxy

import (
	"errors"
	"net"

	"github.com/edgelb/edge/proxy/internal/ready"
	"golang.org/x/sys/unix"
)

// errNoSocket reports a connection without a TCP socket under it.
var errNoSocket = errors.New("no TCP socket under the connection")

// takeover moves both sockets of a spliced connection out of Go's net
// package: their descriptors are duplicated, the Go conns (with their
// runtime poll descriptors) are closed, and the duplicates are returned
// for the readiness runtime's Conn (ready.NewConn), whose client socket
// ec then owns (edgeConn.own). On error nothing has changed and the
// caller keeps the Go conns.
func takeover(ec *edgeConn, backend *net.TCPConn) (cfd, bfd int, err error) {
	ctcp := tcpOf(ec.Conn)
	if ctcp == nil || backend == nil {
		return -1, -1, errNoSocket
	}
	cfd, err = ready.DupFD(ctcp)
	if err != nil {
		return -1, -1, err
	}
	bfd, err = ready.DupFD(backend)
	if err != nil {
		unix.Close(cfd)
		return -1, -1, err
	}
	if _, plain := ec.Conn.(*net.TCPConn); !plain {
		// A PROXY-protocol reader may still hold bytes the client sent.
		// With a deadline in the past only those come back; the socket
		// itself is not read.
		ec.Conn.SetReadDeadline(aLongTimeAgo)
		var b [512]byte
		for {
			n, err := ec.Conn.Read(b[:])
			ec.pre = append(ec.pre, b[:n]...)
			if err != nil || n == 0 {
				break
			}
		}
	}
	ec.keepRemote(ec.Conn.RemoteAddr())
	// Closing the Go conns removes them from the runtime poller; the
	// duplicates keep the connections open.
	ec.Conn.Close()
	backend.Close()
	return cfd, bfd, nil
}

// own makes cs, the client's socket taken over, the one ec reads and
// writes; closing it gives ec's place under the accept cap back.
func (ec *edgeConn) own(cs *ready.Sock) {
	cs.OnClose(ec.release)
	ec.s, ec.Conn = cs, nil
}

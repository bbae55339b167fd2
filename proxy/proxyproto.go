package proxy

import (
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"
)

// defaultProxyHeaderTimeout bounds the wait for a PROXY header.
const defaultProxyHeaderTimeout = 5 * time.Second

// ListenProxyProtocol wraps l so that PROXY protocol v1 and v2 headers are
// honoured from trusted peers only:
//
//   - a peer in trusted may send a header (its source becomes RemoteAddr) or
//     none (RemoteAddr stays the peer);
//   - a header from any other peer is rejected: the first read fails and the
//     HTTP server closes the connection, so no one can choose their address.
//
// The header is read lazily on the connection's own goroutine (never in
// Accept) and within timeout (0 means 5s), so a peer that trickles a header
// cannot hold a goroutine forever.
func ListenProxyProtocol(l net.Listener, trusted []netip.Prefix, timeout time.Duration) net.Listener {
	if timeout <= 0 {
		timeout = defaultProxyHeaderTimeout
	}
	trusted = append([]netip.Prefix(nil), trusted...)
	return &proxyproto.Listener{
		Listener:          l,
		ReadHeaderTimeout: timeout,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			if isTrusted(addrOf(o.Upstream), trusted) {
				return proxyproto.USE, nil
			}
			return proxyproto.REJECT, nil
		},
	}
}

// addrOf extracts the IP of a net.Addr; unknown kinds give the zero Addr,
// which is never trusted.
func addrOf(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.TCPAddr:
		if ip, ok := netip.AddrFromSlice(v.IP); ok {
			return ip.Unmap()
		}
	case nil:
	default:
		if ap, err := netip.ParseAddrPort(v.String()); err == nil {
			return ap.Addr().Unmap()
		}
	}
	return netip.Addr{}
}

package proxy

import (
	"net"
	"testing"

	"github.com/edgelb/edge/proxy/internal/ready"
)

// TestRemoteAddrAfterTakeover checks that the client's address an
// edgeConn keeps for after the takeover is the one it was accepted with,
// of the same type, for TCP addresses of every form and for a PROXY
// header's other kinds, without holding the accepted address itself.
func TestRemoteAddrAfterTakeover(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, 7).To4(), Port: 40000},
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40001}, // 16-byte form
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 443, Zone: "eth0"},
		&net.TCPAddr{},
		&net.UnixAddr{Name: "/run/lb.sock", Net: "unix"},
		&net.UDPAddr{IP: net.IPv4(198, 51, 100, 1), Port: 53},
	} {
		ec := &edgeConn{s: ready.NewSock(-1)}
		ec.keepRemote(a)
		got := ec.RemoteAddr()
		if got.Network() != a.Network() || got.String() != a.String() {
			t.Errorf("kept %s %q, got %s %q", a.Network(), a, got.Network(), got)
		}
		if ta, ok := a.(*net.TCPAddr); ok {
			gt, ok := got.(*net.TCPAddr)
			switch {
			case !ok:
				t.Errorf("kept a *net.TCPAddr, got %T", got)
			case !gt.IP.Equal(ta.IP) || len(gt.IP) != len(ta.IP) && ta.IP != nil:
				t.Errorf("kept IP %v (%d bytes), got %v (%d bytes)", ta.IP, len(ta.IP), gt.IP, len(gt.IP))
			case ta.IP != nil && gt == ta:
				t.Errorf("%v: the accepted address itself is held", a)
			}
		}
		rc := ready.NewRecordConn(ec.s, nil, nil, ec, nil)
		if got := rc.RemoteAddr(); got.String() != a.String() {
			t.Errorf("record layer: kept %q, got %q", a, got)
		}
	}
}

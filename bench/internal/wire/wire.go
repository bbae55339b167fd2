package wire

import (
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/edgelb/edge/bench/internal/stats"
)

// Commands the orchestrator sends.
const (
	// CmdStart opens the measurement window.
	CmdStart = "start"
	// CmdStop closes it; the generator answers with an EventResult.
	CmdStop = "stop"
	// CmdEcho asks an idle-mode generator for one more small echo on every
	// connection it holds, at any time after EventReady; it answers with an
	// EventEchoed. It shows that connections held for a while still carry
	// traffic end to end.
	CmdEcho = "echo"
	// CmdStats asks a hold-mode generator for an EventStats.
	CmdStats = "stats"
)

// Event kinds the generator sends.
const (
	// EventReady says every connection is established (and, for the connect
	// phase, every worker has warmed up) and the generator awaits CmdStart.
	EventReady = "ready"
	// EventResult carries the counts of the window closed by CmdStop.
	EventResult = "result"
	// EventFatal says the generator gave up; Error says why.
	EventFatal = "fatal"
	// EventEchoed answers CmdEcho: Messages counts the connections whose
	// echo came back, out of Conns.
	EventEchoed = "echoed"
	// EventStats answers CmdStats in hold mode: Conns are up now, Ops
	// counts every upgrade so far (reconnects included), Ended the
	// connections that ended after their upgrade, Messages the active
	// echoes so far and Latency those since the previous CmdStats.
	EventStats = "stats"
)

// Event is one line written by a generator.
type Event struct {
	Event string `json:"event"`
	// Conns is the number of connections established (idle, echo, rate).
	Conns int `json:"conns,omitempty"`
	// Errors counts failed dials, handshakes, upgrades, reads or writes;
	// ErrorSample is the text of the first one.
	Errors      uint64 `json:"errors"`
	ErrorSample string `json:"error_sample,omitempty"`
	// Messages counts echoed messages inside the window (or, in an
	// EventEchoed, the connections that answered CmdEcho).
	Messages uint64 `json:"messages,omitempty"`
	// Ops counts completed connect+handshake+upgrade+echo cycles inside the
	// window (connect phase); Resumed counts those whose TLS session was
	// resumed (tls.ConnectionState.DidResume).
	Ops     uint64 `json:"ops,omitempty"`
	Ended   uint64 `json:"ended,omitempty"`
	Resumed uint64 `json:"resumed,omitempty"`
	// Latency holds echo round trips (rate) or connect cycles (connect).
	Latency *stats.Histogram `json:"latency,omitempty"`
	// Cipher and Curve describe the negotiated TLS parameters of one
	// connection, so a report can show that every proxy was measured alike.
	Cipher string `json:"cipher,omitempty"`
	Curve  string `json:"curve,omitempty"`
	// Window is the measured duration between CmdStart and CmdStop.
	Window time.Duration `json:"window_ns,omitempty"`
	// Error is the reason of an EventFatal.
	Error string `json:"error,omitempty"`
}

// SourceAddr returns the i-th source address counted from base over the
// whole IPv4 address (127.0.0.255 is followed by 127.0.1.0). A generator
// dials from SourceAddr(-src-base, -src-offset+k) for k below -src-count; an
// orchestrator uses the same count to know which addresses its generators
// take.
func SourceAddr(base netip.Addr, i int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT from linux/in.h (Linux
// 4.2+), absent from package syscall: binding a source address with it
// defers the port choice to connect(), which can then reuse a port for
// another destination instead of reserving it for every destination.
const ipBindAddressNoPort = 24

// SourceDialer dials from src with IP_BIND_ADDRESS_NO_PORT, so that
// thousands of connections from a few source addresses never run out of
// ephemeral ports; timeout 0 leaves the dial to the context.
func SourceDialer(src netip.Addr, timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout:   timeout,
		LocalAddr: &net.TCPAddr{IP: src.AsSlice()},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			}); err != nil {
				return err
			}
			return serr
		},
	}
}

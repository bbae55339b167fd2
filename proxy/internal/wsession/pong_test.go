package wsession

import (
	"bytes"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/wswire"
)

// clientFrame is a masked client frame (RFC 6455 §5.3).
func clientFrame(op byte, payload []byte) []byte {
	mask := [4]byte{1, 2, 3, 4}
	return wswire.AppendFrame(nil, op, payload, &mask)
}

// edgePings has the session write its ping to the client, as a driver does.
func edgePings(t *testing.T, s *Session) {
	t.Helper()
	s.fw.pingWanted.Store(true)
	c := s.BackendControl()
	if !bytes.Equal(c.Frame, wswire.Ping) {
		t.Fatalf("BackendControl: %+v, want a ping", c)
	}
	s.ControlWritten(c, 3)
}

// toBackend feeds p to the session as a driver does and returns what goes
// to the backend and how many bytes edge consumed as pongs.
func toBackend(s *Session, p []byte) (out []byte, dropped int) {
	for len(p) > 0 {
		v := s.FromClient(p, 4)
		out = append(out, p[:v.N]...)
		if v.Drop == 0 {
			break
		}
		dropped += v.Drop
		p = p[v.N+v.Drop:]
	}
	return out, dropped
}

var pongConfigs = map[string]*Config{
	"limits":    {PingInterval: time.Second, MaxFrameBytes: 1 << 20},
	"pingsOnly": {PingInterval: time.Second},
}

// TestPongToEdgePingConsumed: the client's pong to edge's ping ends at
// edge, the frames around it go on; a second pong (nothing out) goes on.
func TestPongToEdgePingConsumed(t *testing.T) {
	for name, cfg := range pongConfigs {
		t.Run(name, func(t *testing.T) {
			var s Session
			s.Init(cfg, 1)
			edgePings(t, &s)
			a, b := clientFrame(wswire.OpText, []byte("a")), clientFrame(wswire.OpText, []byte("b"))
			pong := clientFrame(wswire.OpPong, nil)
			in := append(append(append([]byte{}, a...), pong...), b...)
			out, dropped := toBackend(&s, in)
			if want := append(append([]byte{}, a...), b...); !bytes.Equal(out, want) || dropped != len(pong) {
				t.Fatalf("to the backend % x (%d dropped), want % x (%d)", out, dropped, want, len(pong))
			}
			if out, _ := toBackend(&s, pong); !bytes.Equal(out, pong) {
				t.Fatalf("unsolicited pong after the answer: % x went on, want % x", out, pong)
			}
		})
	}
}

// TestPongForwardedWhenNotEdges: pongs that may answer someone else, or
// no one, go on: before any ping from edge, with a backend ping
// outstanding (until a pong went on), with data, with its header split
// across reads. (An unmasked one breaks RFC 6455 §5.1 and is refused:
// strict_test.go.)
func TestPongForwardedWhenNotEdges(t *testing.T) {
	pong := clientFrame(wswire.OpPong, nil)
	for name, cfg := range pongConfigs {
		t.Run(name, func(t *testing.T) {
			var s Session
			s.Init(cfg, 1)
			if out, _ := toBackend(&s, pong); !bytes.Equal(out, pong) {
				t.Fatalf("unsolicited pong: % x went on", out)
			}
			s.FromBackend(wswire.AppendFrame(nil, wswire.OpPing, nil, nil))
			edgePings(t, &s)
			if out, _ := toBackend(&s, pong); !bytes.Equal(out, pong) {
				t.Fatalf("pong with a backend ping outstanding: % x went on", out)
			}
			if out, d := toBackend(&s, pong); len(out) != 0 || d != len(pong) {
				t.Fatalf("second pong (edge's): % x went on", out)
			}
			for what, p := range map[string][]byte{
				"with data": clientFrame(wswire.OpPong, []byte("x")),
			} {
				edgePings(t, &s)
				if out, _ := toBackend(&s, p); !bytes.Equal(out, p) {
					t.Fatalf("pong %s: % x went on, want % x", what, out, p)
				}
				toBackend(&s, pong) // answers edge's ping
			}
			edgePings(t, &s)
			out1, _ := toBackend(&s, pong[:3])
			out2, _ := toBackend(&s, pong[3:])
			if got := append(out1, out2...); !bytes.Equal(got, pong) {
				t.Fatalf("split pong: % x went on, want % x", got, pong)
			}
		})
	}
}

// TestPongInsidePayloadForwarded: bytes that look like a pong inside a
// frame's payload are payload.
func TestPongInsidePayloadForwarded(t *testing.T) {
	var s Session
	s.Init(&Config{PingInterval: time.Second}, 1)
	edgePings(t, &s)
	hdr := []byte{0x82, 0x80 | 6, 0, 0, 0, 0} // mask 0: payload in clear
	in := append(hdr, clientFrame(wswire.OpPong, nil)...)
	if out, d := toBackend(&s, in); !bytes.Equal(out, in) || d != 0 {
		t.Fatalf("% x went on (%d dropped), want % x", out, d, in)
	}
}

// TestPongCountsForRate: the pong edge consumes is a client frame for the
// message rate.
func TestPongCountsForRate(t *testing.T) {
	var s Session
	s.Init(&Config{PingInterval: time.Second, Rate: Rate{Messages: 1, MessageBurst: 1}}, 1)
	edgePings(t, &s)
	if out, d := toBackend(&s, clientFrame(wswire.OpPong, nil)); len(out) != 0 || d == 0 {
		t.Fatalf("pong: % x went on, %d dropped", out, d)
	}
	if v := s.FromClient(clientFrame(wswire.OpText, []byte("a")), 5); v.N != 0 || !v.Wake {
		t.Fatalf("message over the rate after the pong: %+v", v)
	}
}

// TestPongAdoptedConservative: a session adopted from a hand-off record
// forwards the client's next pong (a backend ping may be waiting), and
// consumes the pong to edge's next ping after that; one whose client
// frames were not followed forwards every pong.
func TestPongAdoptedConservative(t *testing.T) {
	pong := clientFrame(wswire.OpPong, nil)
	for name, cfg := range pongConfigs {
		t.Run(name, func(t *testing.T) {
			var old Session
			old.Init(cfg, 1)
			edgePings(t, &old)
			st, err := old.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var s Session
			s.Init(cfg, 1)
			if err := s.UnmarshalBinary(st); err != nil {
				t.Fatal(err)
			}
			edgePings(t, &s)
			if out, _ := toBackend(&s, pong); !bytes.Equal(out, pong) {
				t.Fatalf("first pong after adoption: % x went on", out)
			}
			edgePings(t, &s)
			out, _ := toBackend(&s, pong)
			if blind := !cfg.tracksClient(); blind != bytes.Equal(out, pong) {
				t.Fatalf("second pong after adoption: % x went on (client frames followed: %v)", out, !blind)
			}
		})
	}
}

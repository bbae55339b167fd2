package wsession

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/edgelb/edge/internal/wswire"
)

// rawFrame is a frame with the first header byte b0 (FIN, RSV, opcode)
// and payload, masked with a fixed key when masked.
func rawFrame(b0 byte, masked bool, payload []byte) []byte {
	var k *[4]byte
	if masked {
		k = &[4]byte{0x11, 0x22, 0x33, 0x44}
	}
	f := wswire.AppendFrame(nil, b0&0x0f, payload, k)
	f[0] = b0
	return f
}

// strictCases are frames that break a rule, each after a good text frame,
// as a client (masked) would send them; server is the same stream as a
// server would, and deflate the connection's extension.
var strictCases = []struct {
	name    string
	frames  func(masked bool) []byte
	deflate bool
	want    fault
}{
	{"reserved opcode 3", func(m bool) []byte { return rawFrame(0x83, m, nil) }, false, faultOpcode},
	{"reserved control opcode 0xB", func(m bool) []byte { return rawFrame(0x8B, m, nil) }, false, faultOpcode},
	{"fragmented ping", func(m bool) []byte { return rawFrame(0x09, m, nil) }, false, faultControlFrag},
	{"RSV1 without an extension", func(m bool) []byte { return rawFrame(0xC1, m, []byte("x")) }, false, faultRSV},
	{"RSV2 under deflate", func(m bool) []byte { return rawFrame(0xA1, m, []byte("x")) }, true, faultRSV},
	{"RSV1 on a continuation under deflate", func(m bool) []byte {
		return append(rawFrame(0x41, m, []byte("x")), rawFrame(0xC0, m, []byte("y"))...)
	}, true, faultRSV},
	{"RSV1 on a ping under deflate", func(m bool) []byte { return rawFrame(0xC9, m, nil) }, true, faultRSV},
	{"continuation outside a message", func(m bool) []byte { return rawFrame(0x80, m, []byte("x")) }, false, faultContinuation},
	{"text inside an unfinished message", func(m bool) []byte {
		return append(rawFrame(0x01, m, []byte("a")), rawFrame(0x81, m, []byte("b"))...)
	}, false, faultNewMessage},
	{"ping of 126 octets", func(m bool) []byte { return rawFrame(0x89, m, make([]byte, 126)) }, false, faultControlLength},
	{"one-octet close body", func(m bool) []byte { return rawFrame(0x88, m, []byte{3}) }, false, faultCloseLength},
	{"close code 1005", func(m bool) []byte { return rawFrame(0x88, m, []byte{0x03, 0xed}) }, false, faultCloseCode},
	{"close code 999", func(m bool) []byte { return rawFrame(0x88, m, []byte{0x03, 0xe7}) }, false, faultCloseCode},
	{"16-bit length under 126", func(m bool) []byte {
		f := rawFrame(0x82, m, []byte("abc"))
		return append(append([]byte{f[0], f[1]&0x80 | 126, 0, 3}, f[2:len(f)-3]...), f[len(f)-3:]...)
	}, false, faultLength},
	{"64-bit length under 65536", func(m bool) []byte {
		f := rawFrame(0x82, m, []byte("abc"))
		h := append([]byte{f[0], f[1]&0x80 | 127}, 0, 0, 0, 0, 0, 0, 0, 3)
		return append(append(h, f[2:len(f)-3]...), f[len(f)-3:]...)
	}, false, faultLength},
	{"64-bit length with the top bit", func(m bool) []byte {
		return []byte{0x82, 127 | b2m(m), 0x80, 0, 0, 0, 0, 0, 0, 0}
	}, false, faultLength},
}

func b2m(masked bool) byte {
	if masked {
		return 0x80
	}
	return 0
}

// TestClientFrameThatBreaksARuleIsRefused: the client gets a close 1002,
// the frames before the bad one go on whole, nothing of it does, and the
// backend gets a masked close 1001 (its stream is between two frames).
func TestClientFrameThatBreaksARuleIsRefused(t *testing.T) {
	cfgs := map[string]*Config{
		"limits":    {MaxMessageBytes: 1 << 20, Inflate: new(Inflaters)},
		"rate":      {Rate: Rate{Messages: 1000}},
		"pingsOnly": {PingInterval: 1e9},
	}
	good := rawFrame(0x81, true, []byte("hello"))
	cases := append(strictCases[:len(strictCases):len(strictCases)], struct {
		name    string
		frames  func(masked bool) []byte
		deflate bool
		want    fault
	}{"unmasked", func(bool) []byte { return rawFrame(0x81, false, []byte("x")) }, false, faultMask})
	for cname, cfg := range cfgs {
		for _, tc := range cases {
			t.Run(cname+"/"+tc.name, func(t *testing.T) {
				var s Session
				s.Init(cfg, 1)
				if tc.deflate {
					s.DeflateOn()
				}
				bad := tc.frames(true)
				stream := append(append([]byte{}, good...), bad...)
				prefix := len(good) + leading(bad, tc.name)
				c := s.FromClient(stream, 2)
				if c.N != prefix || !c.CloseBackend || !c.Wake {
					t.Fatalf("%d of %d bytes went on (want %d), close to backend %v, wake %v", c.N, len(stream), prefix, c.CloseBackend, c.Wake)
				}
				if s.Reason() != ReasonProtocolError || s.closeCode.Load() != CloseProtocolError {
					t.Fatalf("reason %q, close %d; want %q, 1002", s.Reason(), s.closeCode.Load(), ReasonProtocolError)
				}
				if f, client := s.Fault(); f != tc.want.String() || !client {
					t.Fatalf("fault %q (client %v), want %q", f, client, tc.want)
				}
				if c := s.FromClient(good, 3); c.N != 0 {
					t.Fatalf("%d bytes went on after the refusal", c.N)
				}
				ctl := s.BackendControl()
				if !bytes.Equal(ctl.Frame, []byte{0x88, 2, 0x03, 0xea}) || !ctl.End || !ctl.Flush {
					t.Fatalf("control to the client % x (end %v, flush %v), want a close 1002 and the end", ctl.Frame, ctl.End, ctl.Flush)
				}
			})
		}
	}
}

// leading is how many bytes of a case's frames b come before the bad
// frame: the good first frame of the two cases that need one.
func leading(b []byte, name string) int {
	switch name {
	case "RSV1 on a continuation under deflate", "text inside an unfinished message":
		h, _ := wswire.ParseHeader(b)
		return h.Size + int(h.Length)
	}
	return 0
}

// TestBackendFrameThatBreaksARuleIsRefused: the backend's frames before
// the bad one go on, the client then gets a close 1014 (bad gateway) and
// the connection ends; nothing of the bad frame reaches the client.
func TestBackendFrameThatBreaksARuleIsRefused(t *testing.T) {
	good := rawFrame(0x81, false, []byte("hello"))
	cases := append(strictCases[:len(strictCases):len(strictCases)], struct {
		name    string
		frames  func(masked bool) []byte
		deflate bool
		want    fault
	}{"masked", func(bool) []byte { return rawFrame(0x81, true, []byte("x")) }, false, faultMask})
	for _, opaque := range []bool{true, false} {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				cfg := &Config{}
				if !opaque {
					cfg = &Config{PingInterval: 1e9, MaxFrameBytes: 1 << 20}
				}
				var s Session
				s.Init(cfg, 1)
				if tc.deflate {
					s.DeflateOn()
				}
				bad := tc.frames(false)
				stream := append(append([]byte{}, good...), bad...)
				prefix := len(good) + leading(bad, tc.name)
				n, v := s.FromBackend(stream)
				if n != prefix || v != Forward {
					t.Fatalf("%d of %d bytes (%v), want %d forwarded", n, len(stream), v, prefix)
				}
				ctl := s.BackendControl()
				if !bytes.Equal(ctl.Frame, []byte{0x88, 2, 0x03, 0xf6}) || !ctl.End || !ctl.Flush {
					t.Fatalf("control to the client % x (end %v, flush %v), want a close 1014 and the end", ctl.Frame, ctl.End, ctl.Flush)
				}
				if s.Reason() != ReasonBackendProtocolError {
					t.Fatalf("reason %q", s.Reason())
				}
				if f, client := s.Fault(); f != tc.want.String() || client {
					t.Fatalf("fault %q (client %v), want %q", f, client, tc.want)
				}
			})
		}
	}
}

// TestHeaderSplitOverReadsIsRefusedAtItsFirstBadByte: of a bad header
// split over two reads, the bytes before the bad one may already have
// gone; the tracker stops there and the boundaries are lost.
func TestHeaderSplitOverReadsIsRefusedAtItsFirstBadByte(t *testing.T) {
	var s Session
	s.Init(&Config{MaxMessageBytes: 100}, 1)
	f := rawFrame(0x82, true, []byte("abc"))
	bad := append([]byte{f[0], 0x80 | 126, 0}, 3) // 16-bit length 3
	if c := s.FromClient(bad[:3], 2); c.N != 3 {
		t.Fatalf("the first three header bytes: %d went on", c.N)
	}
	c := s.FromClient(bad[3:], 3)
	if c.N != 0 || c.CloseBackend || s.Reason() != ReasonProtocolError {
		t.Fatalf("the bad byte: %d went on, close to backend %v, reason %q", c.N, c.CloseBackend, s.Reason())
	}
}

// TestForeignExtensionLeavesRSVUnjudged: an extension edge does not know
// sets RSV bits as it likes; everything else is still judged.
func TestForeignExtensionLeavesRSVUnjudged(t *testing.T) {
	var s Session
	s.Init(&Config{MaxMessageBytes: 100}, 1)
	s.ForeignExtension()
	s.DeflateOn()
	ok := append(rawFrame(0x71, true, []byte("x")), rawFrame(0x40, true, nil)...)
	if c := s.FromClient(ok, 2); c.N != len(ok) {
		t.Fatalf("RSV bits under a foreign extension: %d of %d went on (%q)", c.N, len(ok), s.Reason())
	}
	if c := s.FromClient(rawFrame(0x81, false, nil), 3); c.N != 0 || s.Reason() != ReasonProtocolError {
		t.Fatalf("an unmasked frame under a foreign extension: %d went on", c.N)
	}
}

// refFault reads data whole, as a strict receiver reads a stream from a
// client (masked frames) or a server under the RSV policy rsv, written
// from RFC 6455 §5 and RFC 7692 §6 apart from the tracker: it returns
// the offset of the first frame that breaks a rule, judged on the bytes
// there are, or -1.
func refFault(data []byte, client bool, rsv uint8) int {
	frag := false
	for i := 0; i < len(data); {
		b := data[i:]
		fin, op, bits := b[0]&0x80 != 0, b[0]&0x0f, b[0]&0x70
		control := op >= 8
		switch op {
		case 0, 1, 2, 8, 9, 10:
		default:
			return i
		}
		if control && !fin {
			return i
		}
		if rsv != rsvAny {
			allowed := byte(0)
			if rsv == rsvDeflate && (op == 1 || op == 2) {
				allowed = 0x40
			}
			if bits&^allowed != 0 {
				return i
			}
		}
		if !control && (op == 0) != frag {
			return i
		}
		if len(b) < 2 {
			return -1
		}
		if (b[1]&0x80 != 0) != client {
			return i
		}
		l, hl := uint64(b[1]&0x7f), 2
		if control && l > 125 || op == 8 && l == 1 {
			return i
		}
		switch l {
		case 126:
			if len(b) < 4 {
				return -1
			}
			if l, hl = uint64(binary.BigEndian.Uint16(b[2:])), 4; l < 126 {
				return i
			}
		case 127:
			if len(b) >= 3 && b[2]&0x80 != 0 {
				return i
			}
			if len(b) < 10 {
				return -1
			}
			if l, hl = binary.BigEndian.Uint64(b[2:]), 10; l <= 0xffff {
				return i
			}
		}
		var key [4]byte
		if client {
			if len(b) < hl+4 {
				return -1
			}
			copy(key[:], b[hl:])
			hl += 4
		}
		if op == 8 && l >= 2 {
			if len(b) < hl+2 {
				return -1
			}
			code := int(b[hl]^key[0])<<8 | int(b[hl+1]^key[1])
			if code < 1000 || code == 1004 || code == 1005 || code == 1006 || code >= 1015 && code < 3000 || code >= 5000 {
				return i
			}
		}
		if !control {
			frag = !fin
		}
		if uint64(len(b)-hl) < l {
			return -1
		}
		i += hl + int(l)
	}
	return -1
}

// FuzzStrictFraming: the tracker, fed the stream in chunks, refuses
// exactly the streams the reference reader refuses, at the same frame
// (or, when that frame's header began in an earlier chunk, at the start
// of the chunk its first bad byte is in), and lets every byte before it
// go on.
func FuzzStrictFraming(f *testing.F) {
	for _, tc := range strictCases {
		f.Add(append(rawFrame(0x81, true, []byte("hi")), tc.frames(true)...), uint8(0), true, b2u(tc.deflate))
		f.Add(append(rawFrame(0x81, false, []byte("hi")), tc.frames(false)...), uint8(3), false, b2u(tc.deflate))
	}
	f.Add(append(rawFrame(0x01, true, []byte("a")), append(rawFrame(0x89, true, []byte("p")), rawFrame(0x80, true, []byte("b"))...)...), uint8(1), true, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8, client bool, policy uint8) {
		rsv := []uint8{rsvNone, rsvDeflate, rsvAny}[policy%3]
		want := refFault(data, client, rsv)
		chunk := len(data) + 1
		if cut > 0 {
			chunk = int(cut%16) + 1
		}
		tr := tracker{rsv: rsv}
		pos := 0
		for pos < len(data) && !tr.bad {
			p := data[pos:min(pos+chunk, len(data))]
			n := tr.feedWith(p, false, &counting{client: client, frames: -1, budget: -1})
			if n < 0 || n > len(p) || n < len(p) && !tr.bad {
				t.Fatalf("fed %d of %d bytes, bad %v", n, len(p), tr.bad)
			}
			pos += n
			if tr.bad && n < len(p) {
				break
			}
		}
		switch {
		case want < 0 && tr.bad:
			t.Fatalf("refused at %d (%v), the reference accepts", pos, tr.fault)
		case want >= 0 && !tr.bad:
			t.Fatalf("accepted, the reference refuses at %d", want)
		case want >= 0 && !tr.broken && pos != want:
			t.Fatalf("refused at %d (%v), the reference at %d", pos, tr.fault, want)
		case want >= 0 && tr.broken && (pos < want || pos > want+wswire.MaxHeader+2):
			t.Fatalf("refused inside the frame at %d (%v), the reference at %d", pos, tr.fault, want)
		}
	})
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

package wsession

import (
	"bytes"
	"testing"

	"github.com/edgelb/edge/internal/wswire"
)

func TestFrameTracker(t *testing.T) {
	// text "hi", binary with 16-bit length (300), ping, close: a server's
	// frames, unmasked.
	var stream []byte
	stream = append(stream, 0x81, 2, 'h', 'i')
	stream = append(stream, 0x82, 126, 0x01, 0x2c)
	stream = append(stream, bytes.Repeat([]byte{'x'}, 300)...)
	stream = append(stream, 0x89, 1, 'p')
	stream = append(stream, 0x88, 2, 0x03, 0xe8)
	boundaries := []int{4, 4 + 4 + 300, 4 + 4 + 300 + 3, len(stream)}

	for chunk := 1; chunk <= len(stream); chunk++ {
		var tr tracker
		var got []int
		pos := 0
		for pos < len(stream) {
			end := min(pos+chunk, len(stream))
			p := stream[pos:end]
			for len(p) > 0 {
				n := tr.feed(p, true)
				pos += n
				p = p[n:]
				if tr.atBoundary() && (len(got) == 0 || got[len(got)-1] != pos) {
					got = append(got, pos)
				}
			}
		}
		if len(got) != len(boundaries) {
			t.Fatalf("chunk %d: boundaries got %v, want %v", chunk, got, boundaries)
		}
		for i := range got {
			if got[i] != boundaries[i] {
				t.Fatalf("chunk %d: boundaries got %v, want %v", chunk, got, boundaries)
			}
		}
		if !tr.closeSeen {
			t.Fatalf("chunk %d: close frame not seen", chunk)
		}
	}

	// 64-bit length with the top bit set breaks a rule: the tracker
	// stops at the frame's header.
	var tr tracker
	if n := tr.feed([]byte{0x81, 0, 0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, false); n != 2 || !tr.bad || tr.fault != faultLength {
		t.Fatalf("64-bit length with MSB set: fed %d, bad %v, fault %v", n, tr.bad, tr.fault)
	}
}

// TestFrameTrackerLimit: the limit is judged on the header alone, at the
// header's offset, whatever the length encoding.
func TestFrameTrackerLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limit   uint64
		stream  []byte
		wantN   int
		wantBig bool
	}{
		{"7-bit at the limit", 3, []byte{0x81, 3, 'a', 'b', 'c'}, 5, false},
		{"7-bit over", 3, []byte{0x81, 3, 'a', 'b', 'c', 0x81, 4}, 5, true},
		{"16-bit over", 125, []byte{0x82, 126, 0, 126}, 0, true},
		{"64-bit over", 1 << 20, []byte{0x82, 127, 0, 0, 0, 0, 0, 0x10, 0, 1}, 0, true},
		{"header incomplete", 1, []byte{0x82, 126, 0}, 3, false},
		{"no limit", 0, []byte{0x82, 126, 0xff, 0xff}, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := tracker{limit: tc.limit}
			n := tr.feed(tc.stream, false)
			if n != tc.wantN || tr.tooBig != tc.wantBig {
				t.Fatalf("feed: got %d, tooBig %v; want %d, %v", n, tr.tooBig, tc.wantN, tc.wantBig)
			}
			if tr.tooBig && tr.atBoundary() {
				t.Fatal("a tracker over its limit reports a boundary")
			}
		})
	}
}

// TestFrameTrackerMessageLimit: the message limit sums data frames from a
// non-continuation opcode on, ignores control frames, and trips at the
// header of the frame that crosses it.
func TestFrameTrackerMessageLimit(t *testing.T) {
	var s []byte
	s = append(s, frame(wswire.OpText, false, bytes.Repeat([]byte{'a'}, 40))...)
	s = append(s, frame(wswire.OpPing, true, []byte("ping"))...)
	s = append(s, frame(wswire.OpContinuation, true, bytes.Repeat([]byte{'b'}, 60))...) // 100: at the limit
	s = append(s, frame(wswire.OpBinary, false, bytes.Repeat([]byte{'c'}, 60))...)
	over := len(s)
	s = append(s, frame(wswire.OpContinuation, true, bytes.Repeat([]byte{'d'}, 41))...) // 101
	tr := tracker{msgLimit: 100}
	if n := tr.feed(s, false); n != over || !tr.tooBig || !tr.tooBigMsg {
		t.Fatalf("feed: %d (tooBig %v, message %v), want %d, true, true", n, tr.tooBig, tr.tooBigMsg, over)
	}
}

// frame is an unmasked frame with opcode op; fin false leaves the message open.
func frame(op byte, fin bool, payload []byte) []byte {
	b := wswire.AppendFrame(nil, op, payload, nil)
	if !fin {
		b[0] &^= 0x80
	}
	return b
}

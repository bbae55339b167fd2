package wsession

import (
	"slices"
	"testing"

	"github.com/edgelb/edge/internal/wswire"
)

// FuzzFrameHeader: the tracker finds the same frame boundaries however the
// stream is split, stops for the same rule at a frame that breaks one,
// and never panics on arbitrary bytes.
func FuzzFrameHeader(f *testing.F) {
	// Text frame "hi" then a close.
	f.Add([]byte{0x81, 2, 'h', 'i', 0x88, 0}, uint8(1))
	// 16-bit length header split mid-way.
	f.Add(append([]byte{0x82, 126, 0, 3}, 'a', 'b', 'c'), uint8(3))
	// Masked client frame.
	f.Add([]byte{0x81, 0x81, 1, 2, 3, 4, 'x'}, uint8(2))
	// 64-bit length with the forbidden top bit.
	f.Add([]byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		if h, err := wswire.ParseHeader(data); err == nil && h.Size != 0 && (h.Size < 2 || h.Size > wswire.MaxHeader || h.Size > len(data)) {
			t.Fatalf("header size %d out of range for %d bytes", h.Size, len(data))
		}
		boundaries := func(chunk int) []int {
			var tr tracker
			var got []int
			for pos := 0; pos < len(data) && !tr.bad; {
				p := data[pos:min(pos+chunk, len(data))]
				for len(p) > 0 && !tr.bad {
					n := tr.feed(p, true)
					if n < 0 || n > len(p) || n == 0 && !tr.bad {
						t.Fatalf("feed returned %d for %d bytes", n, len(p))
					}
					pos += n
					p = p[n:]
					if tr.atBoundary() && (len(got) == 0 || got[len(got)-1] != pos) {
						got = append(got, pos)
					}
				}
			}
			return got
		}
		whole := boundaries(len(data) + 1)
		parts := boundaries(int(split%16) + 1)
		if len(whole) != len(parts) {
			t.Fatalf("boundaries: whole %v, split %v", whole, parts)
		}
		for i := range whole {
			if whole[i] != parts[i] {
				t.Fatalf("boundaries: whole %v, split %v", whole, parts)
			}
		}
	})
}

// FuzzFrameLimit: the frame-size limit trips at the same header however
// the stream is split, before any of that frame's payload is consumed.
func FuzzFrameLimit(f *testing.F) {
	// A frame at the limit, then one over it.
	f.Add([]byte{0x81, 3, 'a', 'b', 'c', 0x81, 4, 'a', 'b', 'c', 'd'}, uint8(2), uint16(3))
	// A 16-bit-length header over the limit, split mid-way.
	f.Add([]byte{0x82, 126, 1, 0}, uint8(1), uint16(255))
	// A 64-bit length with the forbidden top bit: broken, not too big.
	f.Add([]byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, uint8(3), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8, limit uint16) {
		if limit == 0 {
			return
		}
		// trip returns where the tracker stopped and whether it did.
		trip := func(chunk int) (int, bool, bool) {
			tr := tracker{limit: uint64(limit)}
			for pos := 0; pos < len(data); {
				p := data[pos:min(pos+chunk, len(data))]
				n := tr.feed(p, false)
				if n < 0 || n > len(p) {
					t.Fatalf("feed returned %d for %d bytes", n, len(p))
				}
				if tr.tooBig {
					return pos + n, tr.split, true
				}
				if tr.bad {
					return -1, false, false
				}
				pos += len(p)
			}
			return len(data), false, false
		}
		at, _, big := trip(len(data) + 1)
		sat, split, sbig := trip(int(cut%16) + 1)
		if big != sbig {
			t.Fatalf("too big: whole %v, split %v", big, sbig)
		}
		if !big {
			return
		}
		// A header that began in an earlier chunk has bytes already past.
		if split && (sat < at || sat-at >= wswire.MaxHeader) || !split && sat != at {
			t.Fatalf("stopped at %d (split header %v), want %d", sat, split, at)
		}
	})
}

// FuzzMessageLimit: with a frame and a message limit, a random stream cut
// at random points (cuts gives the chunk lengths) trips at the same header,
// for the same cause, as the stream fed whole; and a stream that trips
// for its message holds a message whose data frames sum past the limit.
func FuzzMessageLimit(f *testing.F) {
	// Three fragments of 4 (text, continuation, continuation): 12 > 10.
	f.Add([]byte{0x01, 4, 'a', 'b', 'c', 'd', 0x00, 4, 'e', 'f', 'g', 'h', 0x80, 4, 'i', 'j', 'k', 'l'}, []byte{1, 5, 2}, uint16(0), uint16(10))
	// A ping between fragments does not count; a new message restarts.
	f.Add([]byte{0x01, 4, 'a', 'b', 'c', 'd', 0x89, 2, 'p', 'p', 0x80, 4, 'e', 'f', 'g', 'h', 0x81, 8, 1, 2, 3, 4, 5, 6, 7, 8}, []byte{3}, uint16(0), uint16(8))
	// 16-bit fragments, the frame limit trips first.
	f.Add([]byte{0x02, 126, 0, 200}, []byte{1, 1, 1}, uint16(100), uint16(1000))
	f.Fuzz(func(t *testing.T, data, cuts []byte, limit, msgLimit uint16) {
		type decision struct {
			at          int
			big, forMsg bool
		}
		run := func(cuts []byte) decision {
			tr := tracker{limit: uint64(limit), msgLimit: uint64(msgLimit)}
			for pos, i := 0, 0; pos < len(data); i++ {
				k := len(data)
				if len(cuts) > 0 {
					k = int(cuts[i%len(cuts)]%32) + 1
				}
				p := data[pos:min(pos+k, len(data))]
				n := tr.feed(p, false)
				if n < 0 || n > len(p) {
					t.Fatalf("feed returned %d for %d bytes", n, len(p))
				}
				if tr.tooBig {
					at := pos + n
					if tr.split {
						// The header began in an earlier chunk: find its start.
						at = -1
					}
					return decision{at, true, tr.tooBigMsg}
				}
				if tr.bad {
					return decision{-2, false, false}
				}
				pos += len(p)
			}
			return decision{len(data), false, false}
		}
		whole, split := run(nil), run(cuts)
		if whole.big != split.big || whole.forMsg != split.forMsg {
			t.Fatalf("whole %+v, split %+v", whole, split)
		}
		if split.at >= 0 && whole.at != split.at {
			t.Fatalf("stopped at %d split, %d whole", split.at, whole.at)
		}
		if whole.forMsg && msgLimit == 0 || whole.big && !whole.forMsg && limit == 0 {
			t.Fatalf("tripped without the limit: %+v", whole)
		}
	})
}

// FuzzCloseCode: the close code the frame tracker reports for the first
// close frame of a stream is the same however the stream is chunked, is
// reported at most once, and equals the frame's first two (unmasked)
// payload bytes.
func FuzzCloseCode(f *testing.F) {
	// A text frame, then close 1000.
	f.Add([]byte{0x81, 2, 'h', 'i', 0x88, 2, 0x03, 0xe8}, uint8(1))
	// A masked client close 4001 with a reason.
	f.Add(append([]byte{0x88, 0x85, 1, 2, 3, 4}, 0x0f^1, 0xa1^2, 'b'^3, 'y'^4, 'e'^1), uint8(2))
	// A close without a status (1005), then another close ignored.
	f.Add([]byte{0x88, 0, 0x88, 2, 0x03, 0xe9}, uint8(3))
	// A one-byte close body: a protocol error.
	f.Add([]byte{0x88, 1, 7}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		codes := func(chunk int) []int {
			var got []int
			var tr tracker
			for pos := 0; pos < len(data); pos += chunk {
				tr.feed(data[pos:min(pos+chunk, len(data))], false)
				if c, ok := tr.newClose(); ok {
					got = append(got, c)
				}
			}
			if _, ok := tr.newClose(); ok {
				t.Fatal("newClose reported a code twice")
			}
			return got
		}
		whole, parts := codes(len(data)+1), codes(int(split%16)+1)
		if len(whole) > 1 || !slices.Equal(whole, parts) {
			t.Fatalf("codes: whole %v, split %v", whole, parts)
		}
		if len(whole) == 1 && (whole[0] < 0 || whole[0] > 0xffff) {
			t.Fatalf("code %d out of range", whole[0])
		}
	})
}

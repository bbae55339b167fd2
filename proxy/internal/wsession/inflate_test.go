package wsession

import (
	"bytes"
	"compress/flate"
	"io"
	"math/rand/v2"
	"testing"
)

// deflateMessage compresses msg as a permessage-deflate sender does
// (RFC 7692 §7.2.1): a sync flush, its 0x00 0x00 0xff 0xff dropped.
func deflateMessage(t testing.TB, w *flate.Writer, buf *bytes.Buffer, msg []byte) []byte {
	t.Helper()
	buf.Reset()
	if _, err := w.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(buf.Bytes())
	if !bytes.HasSuffix(b, []byte{0, 0, 0xff, 0xff}) {
		t.Fatalf("flush did not end in an empty stored block: % x", b[max(0, len(b)-8):])
	}
	return b[:len(b)-4]
}

func mask(b []byte, k [4]byte) []byte {
	out := bytes.Clone(b)
	for i := range out {
		out[i] ^= k[i&3]
	}
	return out
}

// countAll feeds p in random pieces and returns the count.
func countAll(t testing.TB, z *inflater, p []byte, k [4]byte, rnd *rand.Rand, limit uint64) (uint64, int, feedResult) {
	t.Helper()
	off := 0
	for off < len(p) {
		n := 1 + rnd.IntN(len(p)-off)
		if rnd.IntN(3) == 0 {
			n = min(n, 1+rnd.IntN(7))
		}
		keep, r := z.feed(p[off:off+n], k, off, limit)
		if r != feedMore {
			return z.out, off + keep, r
		}
		off += n
	}
	return z.out, len(p), feedMore
}

func messages(rnd *rand.Rand) [][]byte {
	text := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog "), 200)
	random := make([]byte, 5000)
	for i := range random {
		random[i] = byte(rnd.IntN(256))
	}
	return [][]byte{
		[]byte("a"), {}, text, random, bytes.Repeat([]byte{'x'}, 100000),
		append(bytes.Clone(text[:333]), random[:777]...),
	}
}

func TestInflaterCountsWhatFlateInflates(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.BestCompression, flate.HuffmanOnly} {
		var buf bytes.Buffer
		w, _ := flate.NewWriter(&buf, level)
		z := new(inflater)
		for _, msg := range messages(rnd) {
			// Context takeover: one writer for every message.
			c := deflateMessage(t, w, &buf, msg)
			k := [4]byte{byte(rnd.IntN(256)), 1, 2, 3}
			got, _, r := countAll(t, z, mask(c, k), k, rnd, 1<<40)
			if r != feedMore || got != uint64(len(msg)) {
				t.Fatalf("level %d: %d-byte message counted %d (%v)", level, len(msg), got, r)
			}
			z.reset()
		}
	}
}

func TestInflaterStopsAtTheLimit(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	const limit = 4 << 20
	for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.BestCompression} {
		var buf bytes.Buffer
		w, _ := flate.NewWriter(&buf, level)
		msg := bytes.Repeat([]byte{'a'}, limit+1+rnd.IntN(1000))
		c := deflateMessage(t, w, &buf, msg)
		k := [4]byte{9, 8, 7, 6}
		z := new(inflater)
		_, keep, r := countAll(t, z, mask(c, k), k, rnd, limit)
		if r != feedOver {
			t.Fatalf("level %d: %d bytes over a %d limit: %v", level, len(msg), limit, r)
		}
		// What the backend would be given inflates to at most the limit.
		fr := flate.NewReader(bytes.NewReader(c[:keep]))
		n, _ := io.Copy(io.Discard, fr)
		if n > limit {
			t.Fatalf("level %d: kept %d of %d bytes, which inflate to %d > %d", level, keep, len(c), n, limit)
		}
		if n < limit-258*2 {
			t.Fatalf("level %d: kept %d of %d bytes, which inflate to only %d", level, keep, len(c), n)
		}
	}
}

func TestInflaterRefusesWhatIsNotDeflate(t *testing.T) {
	z := new(inflater)
	// BTYPE 11 is reserved (RFC 1951 §3.2.3).
	if _, r := z.feed([]byte{0x07}, [4]byte{}, 0, 100); r != feedBad {
		t.Fatalf("reserved block type: %v", r)
	}
	z.reset()
	// A stored block whose NLEN is not LEN's complement.
	if _, r := z.feed([]byte{0x00, 0x05, 0x00, 0x00, 0x00}, [4]byte{}, 0, 100); r != feedBad {
		t.Fatalf("bad NLEN: %v", r)
	}
}

// FuzzInflater: the count does not depend on how the input is split, it
// never falls short of what compress/flate inflates from the same bytes,
// and on feedOver the bytes kept inflate to at most the limit.
func FuzzInflater(f *testing.F) {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	f.Add(deflateMessage(f, w, &buf, bytes.Repeat([]byte("ab"), 3000)), uint16(7), uint16(100))
	w, _ = flate.NewWriter(&buf, flate.NoCompression)
	f.Add(deflateMessage(f, w, &buf, []byte("stored bytes")), uint16(1), uint16(5))
	w, _ = flate.NewWriter(&buf, flate.HuffmanOnly)
	f.Add(deflateMessage(f, w, &buf, []byte("huffman only, huffman only")), uint16(3), uint16(1000))
	f.Add([]byte{0x07}, uint16(1), uint16(10))
	// Crafted streams: table building, long codes, short matches.
	f.Add(emptyDynamicBlocks(3), uint16(5), uint16(0))
	f.Add(emptyFixedBlocks(12), uint16(2), uint16(0))
	f.Add(shortMatches(40), uint16(9), uint16(60))
	f.Add(longLiterals(20), uint16(4), uint16(10))
	f.Fuzz(func(t *testing.T, p []byte, split, lim uint16) {
		limit := uint64(lim)
		k := [4]byte{0x5a, 0, 0xff, 3}
		m := mask(p, k)
		whole := new(inflater)
		keepW, rW := whole.feed(m, k, 0, limit)
		parts := new(inflater)
		s := 1 + int(split)%16
		keepP, rP := feedMore, 0
		off := 0
		for off < len(m) {
			n := min(s, len(m)-off)
			kk, r := parts.feed(m[off:off+n], k, off, limit)
			if r != feedMore {
				keepP, rP = feedResult(r), off+kk
				break
			}
			off += n
		}
		if off >= len(m) {
			rP = len(m)
		}
		// In pieces, bytes of the crossing step that came in an earlier
		// piece already went: they cannot complete it, so they are safe too.
		if keepP != rW || (rW == feedOver && rP < keepW) || (rW == feedMore && whole.out != parts.out) {
			t.Fatalf("whole: %v keep %d out %d; in pieces of %d: %v keep %d out %d", rW, keepW, whole.out, s, keepP, rP, parts.out)
		}
		if rW == feedBad {
			return
		}
		if rW == feedOver {
			n, _ := io.Copy(io.Discard, flate.NewReader(bytes.NewReader(p[:rP])))
			if uint64(n) > limit {
				t.Fatalf("kept %d bytes (in pieces of %d) inflate to %d, over %d", rP, s, n, limit)
			}
			return
		}
		n, _ := io.Copy(io.Discard, flate.NewReader(bytes.NewReader(p)))
		if uint64(n) > whole.out {
			t.Fatalf("flate inflates %d bytes to %d, counted %d", len(p), n, whole.out)
		}
	})
}

// puffDecode is the bit-by-bit canonical decoding of zlib's puff.c, the
// reference the table-driven huffman.decode must agree with everywhere:
// the symbol, its length, when more bits are needed and when no code
// matches.
func puffDecode(lens []uint8, acc uint64, nb uint) (sym int, n uint) {
	var count [maxBits + 1]int
	for _, l := range lens {
		count[l]++
	}
	var offs [maxBits + 2]int
	for l := 1; l <= maxBits; l++ {
		offs[l+1] = offs[l] + count[l]
	}
	syms := make([]int, len(lens))
	for s, l := range lens {
		if l != 0 {
			syms[offs[l]] = s
			offs[l]++
		}
	}
	code, first, index := 0, 0, 0
	for l := uint(1); l <= maxBits; l++ {
		if l > nb {
			return 0, 0
		}
		code |= int(acc>>(l-1)) & 1
		c := count[l]
		if code-c < first {
			return syms[index+code-first], l
		}
		index += c
		first = (first + c) << 1
		code <<= 1
	}
	return -1, maxBits
}

// randomLens are code lengths of every shape a sender can name: complete,
// incomplete, a single code, none, over-subscribed, up to 15 bits.
func randomLens(rnd *rand.Rand, n int) []uint8 {
	lens := make([]uint8, n)
	switch rnd.IntN(4) {
	case 0: // a complete code: split leaves of a random tree
		leaves := []uint8{0}
		for len(leaves) < 2+rnd.IntN(n-1) {
			i := rnd.IntN(len(leaves))
			if leaves[i] == maxBits {
				break
			}
			leaves[i]++
			leaves = append(leaves, leaves[i])
		}
		for _, p := range rnd.Perm(n)[:len(leaves)] {
			lens[p] = leaves[0]
			leaves = leaves[1:]
		}
	case 1: // one code
		lens[rnd.IntN(n)] = uint8(1 + rnd.IntN(2))
	case 2: // anything
		for i := range lens {
			if rnd.IntN(3) == 0 {
				lens[i] = uint8(rnd.IntN(maxBits + 1))
			}
		}
	}
	return lens
}

func TestHuffmanDecodesAsPuff(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	var z inflater
	for range 3000 {
		which := rnd.IntN(3)
		lens := randomLens(rnd, []int{maxLit, 30, numCLens}[which])
		if which == 2 {
			for i := range lens {
				lens[i] = min(lens[i], 7)
			}
		}
		var ok bool
		var decode func(uint64, uint) (int, uint)
		switch which {
		case 0:
			ok, decode = z.lit.build(lens), z.lit.decode
		case 1:
			ok, decode = z.dist.build(lens), z.dist.decode
		default:
			ok, decode = z.clen.build(lens), z.clen.decode
		}
		if !ok {
			continue
		}
		for range 200 {
			acc, nb := rnd.Uint64(), uint(rnd.IntN(65))
			if nb < 64 {
				acc &= 1<<nb - 1
			}
			s, n := decode(acc, nb)
			ws, wn := puffDecode(lens, acc, nb)
			if s != ws || n != wn {
				t.Fatalf("lens %v: bits %0*b: decoded %d (%d bits), puff %d (%d bits)", lens, nb, acc, s, n, ws, wn)
			}
		}
	}
}

// The streams a client can craft to cost the most per byte count what
// compress/flate inflates from them, in any pieces.
func TestInflaterCountsCraftedStreams(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	for name, p := range map[string][]byte{
		"empty dynamic blocks": emptyDynamicBlocks(500),
		"empty fixed blocks":   emptyFixedBlocks(4000),
		"empty stored blocks":  emptyStoredBlocks(1000),
		"matches of length 3":  shortMatches(3000),
		"15-bit literals":      longLiterals(3000),
	} {
		want, _ := io.Copy(io.Discard, flate.NewReader(bytes.NewReader(p)))
		k := [4]byte{byte(rnd.IntN(256)), 7, 0, 0x80}
		got, _, r := countAll(t, new(inflater), mask(p, k), k, rnd, 1<<40)
		if r != feedMore || got != uint64(want) {
			t.Fatalf("%s: counted %d (%v), flate inflates %d", name, got, r, want)
		}
	}
}

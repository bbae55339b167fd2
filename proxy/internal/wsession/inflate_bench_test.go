package wsession

import (
	"bytes"
	"compress/flate"
	"fmt"
	"math/rand/v2"
	"testing"
)

// bitWriter writes DEFLATE's LSB-first bits, for crafted streams.
type bitWriter struct {
	b    []byte
	acc  uint64
	bits uint
}

func (w *bitWriter) put(v uint64, n uint) {
	w.acc |= v << w.bits
	w.bits += n
	for w.bits >= 8 {
		w.b = append(w.b, byte(w.acc))
		w.acc >>= 8
		w.bits -= 8
	}
}

// emptyDynamicBlocks is n dynamic-Huffman blocks that hold nothing but
// their end of block: the most table building per input byte a sender
// can ask for (RFC 1951 §3.2.7: every block carries its own codes).
func emptyDynamicBlocks(n int) []byte {
	var w bitWriter
	for range n {
		w.put(0, 1)  // BFINAL 0
		w.put(2, 2)  // dynamic
		w.put(29, 5) // HLIT: 286 codes
		w.put(29, 5) // HDIST: 30 codes
		w.put(15, 4) // HCLEN: 19 code length codes
		// Code length code: symbols 18 and 1 and 2, each 2 bits; 0 for
		// the rest, in clenOrder (16 17 18 0 8 7 9 6 10 5 11 4 12 3 13 2 14 1 15).
		for _, s := range clenOrder {
			l := uint64(0)
			switch s {
			case 18, 1, 2, 0:
				l = 2
			}
			w.put(l, 3)
		}
		// Canonical codes, length 2 each, in symbol order: 0->00, 1->01, 2->10, 18->11 (bit-reversed when written).
		code := map[int]uint64{0: 0, 1: 2, 2: 1, 18: 3}
		// Literal/length lengths: 256 zeros, then EOB (256) length 1, then
		// 285 length 1 -> with 29 more zeros; distances: two of length 1 and 28 zeros.
		zeros := func(k int) {
			for k > 0 {
				r := min(k, 138)
				if r < 11 {
					for range r {
						w.put(code[0], 2)
					}
					return
				}
				w.put(code[18], 2)
				w.put(uint64(r-11), 7)
				k -= r
			}
		}
		zeros(256)
		w.put(code[1], 2) // 256: EOB
		zeros(28)
		w.put(code[1], 2) // 285
		w.put(code[1], 2) // dist 0
		w.put(code[1], 2) // dist 1
		zeros(28)
		w.put(0, 1) // EOB: code 0 of length 1
	}
	return w.b
}

// code writes the Huffman code c of n bits, which DEFLATE packs starting
// from its most significant bit (RFC 1951 §3.1.1).
func (w *bitWriter) code(c uint16, n uint8) {
	for i := int(n) - 1; i >= 0; i-- {
		w.put(uint64(c>>i&1), 1)
	}
}

// canonical is the canonical code of the lengths lens (RFC 1951 §3.2.2).
func canonical(lens []uint8) []uint16 {
	var count, next [maxBits + 2]uint16
	for _, l := range lens {
		count[l]++
	}
	count[0] = 0
	for l := 1; l <= maxBits; l++ {
		next[l+1] = (next[l] + count[l]) << 1
	}
	codes := make([]uint16, len(lens))
	for s, l := range lens {
		if l != 0 {
			codes[s] = next[l]
			next[l]++
		}
	}
	return codes
}

// emptyFixedBlocks is n fixed-Huffman blocks holding only their end of
// block: 10 bits each, the most blocks per input byte.
func emptyFixedBlocks(n int) []byte {
	var w bitWriter
	for range n {
		w.put(2, 3)  // BFINAL 0, fixed
		w.code(0, 7) // 256: end of block
	}
	return w.b
}

// emptyStoredBlocks is n empty stored blocks (00 00 00 ff ff).
func emptyStoredBlocks(n int) []byte {
	return bytes.Repeat([]byte{0, 0, 0, 0xff, 0xff}, n)
}

// shortMatches is one fixed-Huffman block of a literal and then n
// matches of length 3 at distance 1: 12 bits for 3 bytes.
func shortMatches(n int) []byte {
	var w bitWriter
	w.put(2, 3)
	w.code(0x30+'a', 8) // literal 'a'
	for range n {
		w.code(1, 7) // 257: length 3
		w.code(0, 5) // distance 1
	}
	w.code(0, 7)
	return w.b
}

// longLiterals is one dynamic block whose literal code runs from 1 to 15
// bits, then n literals of the longest code: the most code bits a decoder
// reads per symbol.
func longLiterals(n int) []byte {
	var w bitWriter
	w.put(4, 3)  // BFINAL 0, dynamic
	w.put(0, 5)  // HLIT: 257
	w.put(0, 5)  // HDIST: 1
	w.put(15, 4) // HCLEN: 19
	// The code length code: symbols 0 to 15, 4 bits each (complete).
	var cl [numCLens]uint8
	for s := range 16 {
		cl[s] = 4
	}
	for _, s := range clenOrder {
		w.put(uint64(cl[s]), 3)
	}
	clc := canonical(cl[:])
	lens := make([]uint8, 258)
	lens[256] = 1
	for s := range 14 {
		lens[s] = uint8(s + 2)
	}
	lens[14] = 15
	for _, l := range lens {
		w.code(clc[l], 4)
	}
	lc := canonical(lens[:257])
	for range n {
		w.code(lc[14], 15)
	}
	w.code(lc[256], 1)
	return w.b
}

func compressed(b *testing.B, data []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	for off := 0; off < len(data); off += 200 {
		w.Write(data[off:min(len(data), off+200)])
		w.Flush()
	}
	return buf.Bytes()
}

func chat(n int) []byte {
	var b bytes.Buffer
	r := rand.New(rand.NewPCG(1, 2))
	for b.Len() < n {
		fmt.Fprintf(&b, `{"type":"message","room":"r%d","user":"u%d","text":"hello %d there","ts":%d}`, r.IntN(50), r.IntN(1000), r.IntN(1e6), 1700000000+r.IntN(1e6))
	}
	return b.Bytes()[:n]
}

// BenchmarkInflaterCount is the counting inflater's cost per input byte
// on plain, compressible and crafted input, beside what splicing the
// same bytes costs in user space (unmasking them).
func BenchmarkInflaterCount(b *testing.B) {
	rnd := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range rnd {
		rnd[i] = byte(r.Uint32())
	}
	inputs := map[string][]byte{
		"plain":           compressed(b, rnd),
		"compressible":    compressed(b, chat(4<<20)),
		"crafted":         emptyDynamicBlocks(100000),
		"crafted-fixed":   emptyFixedBlocks(800000),
		"crafted-stored":  emptyStoredBlocks(200000),
		"crafted-matches": shortMatches(700000),
		"crafted-long":    longLiterals(500000),
	}
	for name, in := range inputs {
		b.Run(name, func(b *testing.B) {
			var z inflater
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				z.reset()
				for off := 0; off < len(in); off += 16 << 10 {
					if _, r := z.feed(in[off:min(len(in), off+16<<10)], [4]byte{}, 0, 1<<40); r == feedBad {
						b.Fatalf("%s: not DEFLATE at %d", name, off)
					}
				}
			}
		})
	}
	b.Run("splice", func(b *testing.B) {
		p := make([]byte, 1<<20)
		b.SetBytes(int64(len(p)))
		m := [4]byte{1, 2, 3, 4}
		for b.Loop() {
			for i := range p {
				p[i] ^= m[i&3]
			}
		}
	})
}

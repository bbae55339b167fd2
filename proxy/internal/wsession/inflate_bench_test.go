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
		"plain":        compressed(b, rnd),
		"compressible": compressed(b, chat(4<<20)),
		"crafted":      emptyDynamicBlocks(100000),
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

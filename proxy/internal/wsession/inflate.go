package wsession

import (
	"encoding/binary"
	"math/bits"
	"sync"
)

// The counting inflater: how many bytes a raw DEFLATE stream (RFC 1951)
// inflates to, without producing them.
//
// Counting needs no LZ77 window: a literal is one byte, a match is its
// length, whatever it copies. So an inflater that only counts holds the
// bit reader and the Huffman codes of the current block (its size is in
// docs/BENCHMARKS.md, "counting compressed input") and no 32 KiB window, and a permessage-deflate message (RFC 7692 §7.2.1)
// always ends at a block boundary on a byte (the sender flushes and drops
// the empty stored block's 0x00 0x00 0xff 0xff), so nothing is carried
// from one message to the next, context takeover or not: an idle
// connection holds no inflater at all. A match may reach back into
// earlier messages (context takeover): its length still counts, and the
// backend, which holds the window, judges the distance.
//
// The input arrives in the pieces the socket reads give, masked
// (RFC 6455 §5.3): every step (a block header, the code length code's
// lengths, one code length, one literal or one length/distance pair, at
// most 57 bits, what a refill of acc always holds) is decoded only
// once all its bits are there, and nothing is consumed before; so a step
// never straddles two calls and the count after any prefix is exactly
// what a decoder can produce from it. The work is bounded by the input
// and by the count (each step either consumes input or produces output),
// and stops at the limit.

// inflater states.
const (
	zHeader    = iota // a block header (BFINAL, BTYPE)
	zStoredLen        // a stored block's LEN and NLEN, byte-aligned
	zStored           // a stored block's bytes
	zTable            // HLIT, HDIST, HCLEN
	zCodeLens         // the code length code's lengths (3 bits each)
	zLens             // literal/length and distance code lengths
	zData             // literals, lengths and distances
	zBad              // not DEFLATE
)

// Sizes of the alphabets (RFC 1951 §3.2.5, §3.2.7).
const (
	maxLit   = 288
	maxDist  = 32
	maxBits  = 15
	numCLens = 19
)

// Lookup table widths: a code of up to this many bits is decoded with one
// lookup of the next bits, a longer one canonically from there (as
// compress/flate and zlib do, with one level). 9 bits hold every literal
// of ordinary text; the code length code is at most 7 bits (§3.2.7).
const (
	litRoot  = 9
	distRoot = 7
	clenRoot = 7
)

// huffman is a canonical Huffman code (RFC 1951 §3.2.2) beside its lookup
// table: an entry is a symbol and its code length (symbol<<4 | length),
// indexed by the next bits as they arrive (LSB first); 0 where no code of
// up to bits bits starts, so the code is longer, or none.
type huffman struct {
	count [maxBits + 1]uint16 // codes of each length
	first [maxBits + 1]uint16 // the first code of each length (MSB first)
	offs  [maxBits + 1]uint16 // where in sym the codes of each length start
	bits  uint8               // the table's width: the root, or the longest code if shorter
}

// build makes h the code with the code lengths lens, its table tab (of
// 1<<root entries) and its symbols in code order sym (none if every code
// fits the table), and reports whether it is usable: not over-subscribed,
// and complete unless it has a single code (RFC 1951 allows one distance
// code of one bit). The work is in the codes, not in lens: zero lengths
// are skipped eight at a time, and the table is only as wide as the
// longest code, so a block that names many unused symbols costs little
// more than the bits that name them.
func (h *huffman) build(lens []uint8, tab, sym []uint16, root uint) bool {
	h.count = [maxBits + 1]uint16{}
	var used [maxLit + maxDist]uint16 // the symbols with a code
	n := 0
	for i := 0; i < len(lens); i++ {
		if i+8 <= len(lens) && binary.LittleEndian.Uint64(lens[i:]) == 0 {
			i += 7
			continue
		}
		if l := lens[i]; l != 0 {
			h.count[l]++
			used[n] = uint16(i)
			n++
		}
	}
	longest := uint(0)
	left := 1
	for l := 1; l <= maxBits; l++ {
		left = left<<1 - int(h.count[l])
		if left < 0 {
			return false
		}
		if h.count[l] != 0 {
			longest = uint(l)
		}
	}
	h.bits = uint8(min(root, longest))
	var next [maxBits + 2]uint16
	for l := 1; l <= maxBits; l++ {
		h.offs[l] = h.offs[l-1] + h.count[l-1]
		next[l+1] = (next[l] + h.count[l]) << 1
	}
	h.offs[0], h.offs[1] = 0, 0
	h.first = [maxBits + 1]uint16(next[:maxBits+1])
	t := tab[:1<<h.bits]
	clear(t)
	for _, s := range used[:n] {
		l := uint(lens[s])
		if l > uint(h.bits) {
			sym[h.offs[l]+next[l]-h.first[l]] = s
		} else {
			e := s<<4 | uint16(l)
			for r := uint(bits.Reverse16(next[l]) >> (16 - l)); r < uint(len(t)); r += 1 << l {
				t[r] = e
			}
		}
		next[l]++
	}
	// An incomplete code is only allowed for a single code of length 1.
	return n == 0 || left == 0 || n == 1 && h.count[1] == 1
}

// decode reads one symbol from the nb bits of acc (LSB first) and returns
// it with its length; n 0: more bits are needed; sym -1: no such code (a
// verdict given, as puff.c gives it, once 15 bits are there).
func (h *huffman) decode(tab, sym []uint16, acc uint64, nb uint) (s int, n uint) {
	e := tab[acc&(1<<h.bits-1)&uint64(len(tab)-1)]
	if n := uint(e & 15); n != 0 {
		if n > nb {
			return 0, 0
		}
		return int(e >> 4), n
	}
	rev := uint(bits.Reverse16(uint16(acc)))
	for l := uint(h.bits) + 1; l <= maxBits; l++ {
		if l > nb {
			return 0, 0
		}
		if c := rev>>(16-l) - uint(h.first[l]); c < uint(h.count[l]) {
			return int(sym[uint(h.offs[l])+c]), l
		}
	}
	return -1, maxBits
}

// litCode, distCode and clenCode are a block's three codes with their
// tables (§3.2.7).
type (
	litCode struct {
		huffman
		tab [1 << litRoot]uint16
		sym [maxLit]uint16
	}
	distCode struct {
		huffman
		tab [1 << distRoot]uint16
		sym [maxDist]uint16
	}
	clenCode struct {
		huffman
		tab [1 << clenRoot]uint16
	}
)

func (c *litCode) build(lens []uint8) bool { return c.huffman.build(lens, c.tab[:], c.sym[:], litRoot) }
func (c *litCode) decode(acc uint64, nb uint) (int, uint) {
	return c.huffman.decode(c.tab[:], c.sym[:], acc, nb)
}
func (c *distCode) build(lens []uint8) bool {
	return c.huffman.build(lens, c.tab[:], c.sym[:], distRoot)
}
func (c *distCode) decode(acc uint64, nb uint) (int, uint) {
	return c.huffman.decode(c.tab[:], c.sym[:], acc, nb)
}
func (c *clenCode) build(lens []uint8) bool { return c.huffman.build(lens, c.tab[:], nil, clenRoot) }
func (c *clenCode) decode(acc uint64, nb uint) (int, uint) {
	return c.huffman.decode(c.tab[:], nil, acc, nb)
}

// Length and distance bases and extra bits (RFC 1951 §3.2.5).
var (
	lenBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lenExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	// Distance codes 30 and 31 do not occur; their extra bits are 0 so
	// that decoding them fails on the code, not on a table index.
	distExtra = [32]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	clenOrder = [numCLens]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

// fixedCodes are the codes of a fixed-Huffman block (§3.2.6): built once,
// read-only after, shared by every inflater.
var fixedCodes = func() *struct {
	lit  litCode
	dist distCode
} {
	var lit [maxLit]uint8
	for i := range lit {
		switch {
		case i < 144:
			lit[i] = 8
		case i < 256:
			lit[i] = 9
		case i < 280:
			lit[i] = 7
		default:
			lit[i] = 8
		}
	}
	var dist [30]uint8
	for i := range dist {
		dist[i] = 5
	}
	c := new(struct {
		lit  litCode
		dist distCode
	})
	c.lit.build(lit[:])
	c.dist.build(dist[:])
	return c
}()

// inflater counts one message. Its zero value is ready; reset readies it
// for the next.
type inflater struct {
	acc    uint64 // bits not yet consumed, the next one lowest
	nb     uint   // bits in acc
	loaded uint64 // bytes of the message loaded into acc
	mark   uint64 // message bit offset where the last step began
	out    uint64 // bytes the message inflated to so far
	state  uint8
	stored uint32 // bytes left in a stored block
	final  bool   // the current block has BFINAL set
	ended  bool   // a block with BFINAL set has ended
	fixed  bool   // the block uses fixedCodes, not lit and dist

	hlit, hdist, hclen, n int
	lens                  [maxLit + maxDist]uint8
	clen                  clenCode
	lit                   litCode
	dist                  distCode
}

func (z *inflater) reset() {
	z.acc, z.nb, z.loaded, z.mark, z.out, z.state, z.stored = 0, 0, 0, 0, 0, zHeader, 0
	z.final, z.ended = false, false
}

// emptyBlockTail is what a permessage-deflate receiver appends to every
// message before inflating it (RFC 7692 §7.2.2).
var emptyBlockTail = [4]byte{0x00, 0x00, 0xff, 0xff}

// finish feeds the tail a receiver appends at the end of a message and
// reports whether the stream then stands where the next message must
// start: at a block boundary on a byte, or past a final block. A message
// that stops inside a block (a sender that did not flush) leaves a
// receiver with context takeover in that block, decoding the next
// message's bytes with its codes, while this counter would start the next
// message from a block header: the two would no longer agree on what the
// bytes mean, and a few bytes that count as a stored block here can be
// thousands of 258-byte matches there.
func (z *inflater) finish(limit uint64) bool {
	tail := emptyBlockTail
	if _, r := z.feed(tail[:], [4]byte{}, 0, limit); r != feedMore {
		return z.ended && r != feedOver
	}
	return z.ended || z.state == zHeader && z.nb == 0
}

// feedResult is what one feed came to.
type feedResult uint8

const (
	feedMore feedResult = iota // everything consumed, within the limit
	feedOver                   // the message inflates past the limit
	feedBad                    // the input is not DEFLATE
)

// feed consumes the masked payload bytes p, the first of which sits at
// offset pos (mod 4) of a frame masked with mask, and counts their output
// against limit. On feedOver, keep is how many bytes of p a decoder may
// be given without being able to inflate past limit: those before the
// byte holding the first bit of the step that crosses it (in a stored
// block, whose bytes count one each, it is exact).
func (z *inflater) feed(p []byte, mask [4]byte, pos int, limit uint64) (keep int, r feedResult) {
	i := 0
	for {
		if z.state == zStored {
			if keep, over := z.storedBytes(p, &i, limit); over {
				return keep, feedOver
			}
			if z.state == zStored {
				return len(p), feedMore
			}
			continue
		}
		for z.nb <= 56 && i < len(p) {
			z.acc |= uint64(p[i]^mask[(pos+i)&3]) << z.nb
			z.nb += 8
			i++
			z.loaded++
		}
		z.mark = z.loaded*8 - uint64(z.nb)
		ok := z.step()
		switch {
		case z.state == zBad:
			return 0, feedBad
		case z.out > limit:
			return z.keepBefore(len(p), i), feedOver
		case ok:
		case i == len(p):
			return len(p), feedMore
		case z.nb > 56:
			// No step needs more than 57 bits (the code length code): unreachable, but never loop.
			z.state = zBad
			return 0, feedBad
		}
	}
}

// keepBefore returns how many bytes of p (n long, i of them loaded) come
// before the byte holding the first bit of the last step.
func (z *inflater) keepBefore(n, i int) int {
	k := int64(z.mark/8) - int64(z.loaded-uint64(i))
	if k < 0 {
		return 0
	}
	return min(int(k), n)
}

// storedBytes counts a stored block's bytes, first those in acc (whole
// bytes: the block is byte-aligned), then from p at *i.
func (z *inflater) storedBytes(p []byte, i *int, limit uint64) (keep int, over bool) {
	for z.stored > 0 && z.nb >= 8 {
		if z.out >= limit {
			z.mark = z.loaded*8 - uint64(z.nb)
			return z.keepBefore(len(p), *i), true
		}
		z.acc >>= 8
		z.nb -= 8
		z.stored--
		z.out++
	}
	if z.stored > 0 {
		k := min(uint64(len(p)-*i), uint64(z.stored))
		if room := limit - min(limit, z.out); k > room {
			return *i + int(room), true
		}
		*i += int(k)
		z.loaded += k
		z.stored -= uint32(k)
		z.out += k
	}
	if z.stored == 0 {
		z.blockEnd()
	}
	return 0, false
}

// blockEnd ends the current block.
func (z *inflater) blockEnd() {
	z.state = zHeader
	z.ended = z.ended || z.final
}

func (z *inflater) drop(n uint) {
	z.acc >>= n
	z.nb -= n
}

// step decodes one step from the bits in acc and reports whether it did;
// false: it needs more bits (nothing was consumed), or the stream is bad
// (state zBad).
func (z *inflater) step() bool {
	switch z.state {
	case zHeader:
		return z.header()
	case zStoredLen:
		z.drop(z.nb % 8) // to the byte boundary (RFC 1951 §3.2.4)
		if z.nb < 32 {
			return false
		}
		n, nn := uint32(z.acc&0xffff), uint32(z.acc>>16&0xffff)
		if n != ^nn&0xffff {
			z.state = zBad
			return false
		}
		z.drop(32)
		z.stored, z.state = n, zStored
		if n == 0 {
			z.blockEnd()
		}
		return true
	case zTable:
		if z.nb < 14 {
			return false
		}
		z.hlit, z.hdist, z.hclen = int(z.acc&31)+257, int(z.acc>>5&31)+1, int(z.acc>>10&15)+4
		if z.hlit > 286 || z.hdist > 30 {
			z.state = zBad
			return false
		}
		z.drop(14)
		z.state = zCodeLens
		return true
	case zCodeLens:
		return z.codeLen()
	case zLens:
		return z.codeLens()
	case zData:
		return z.symbol()
	}
	return false
}

func (z *inflater) header() bool {
	if z.nb < 3 {
		return false
	}
	// BFINAL is not honoured: whatever follows a final block in a message
	// is counted too, so the count never falls short of a decoder that
	// carries on.
	typ := z.acc >> 1 & 3
	z.final = z.acc&1 == 1
	z.drop(3)
	switch typ {
	case 0:
		z.state = zStoredLen
	case 1:
		z.fixed = true
		z.state = zData
	case 2:
		z.state = zTable
	default:
		z.state = zBad
		return false
	}
	return true
}

// codeLen reads the lengths of the code length code (§3.2.7), 3 bits
// each, all at once (at most 57 bits: they produce nothing, so reading
// them in one step changes no count).
func (z *inflater) codeLen() bool {
	n := uint(3 * z.hclen)
	if z.nb < n {
		return false
	}
	var lens [numCLens]uint8
	for i := range z.hclen {
		lens[clenOrder[i]] = uint8(z.acc >> (3 * i) & 7)
	}
	z.drop(n)
	if !z.clen.build(lens[:]) {
		z.state = zBad
		return false
	}
	z.n, z.lens = 0, [maxLit + maxDist]uint8{}
	z.state = zLens
	return true
}

// codeLens reads one literal/length or distance code length, or a run.
func (z *inflater) codeLens() bool {
	sym, n := z.clen.decode(z.acc, z.nb)
	if n == 0 {
		return false
	}
	total := z.hlit + z.hdist
	var rep int
	var val uint8
	switch {
	case sym < 0:
		z.state = zBad
		return false
	case sym < 16:
		z.lens[z.n] = uint8(sym)
		z.n++
		z.drop(n)
		return z.tables(total)
	case sym == 16:
		if z.n == 0 || n+2 > z.nb {
			z.state = badIf(z.n == 0, z.state)
			return false
		}
		rep, val = 3+int(z.acc>>n&3), z.lens[z.n-1]
		n += 2
	case sym == 17:
		if n+3 > z.nb {
			return false
		}
		rep = 3 + int(z.acc>>n&7)
		n += 3
	default:
		if n+7 > z.nb {
			return false
		}
		rep = 11 + int(z.acc>>n&127)
		n += 7
	}
	if z.n+rep > total {
		z.state = zBad
		return false
	}
	if val != 0 { // the lengths start at 0 (codeLen)
		for i := range rep {
			z.lens[z.n+i] = val
		}
	}
	z.n += rep
	z.drop(n)
	return z.tables(total)
}

func badIf(bad bool, state uint8) uint8 {
	if bad {
		return zBad
	}
	return state
}

// tables builds the block's codes once all total lengths are read.
func (z *inflater) tables(total int) bool {
	if z.n < total {
		return true
	}
	z.fixed = false
	if z.lens[256] == 0 || !z.lit.build(z.lens[:z.hlit]) || !z.dist.build(z.lens[z.hlit:total]) {
		// No end-of-block code, or a code that cannot be decoded.
		z.state = zBad
		return false
	}
	z.state = zData
	return true
}

// symbol decodes one literal, end of block, or length/distance pair.
func (z *inflater) symbol() bool {
	lit, dist := &z.lit, &z.dist
	if z.fixed {
		lit, dist = &fixedCodes.lit, &fixedCodes.dist
	}
	sym, n := lit.decode(z.acc, z.nb)
	switch {
	case n == 0:
		return false
	case sym < 0 || sym > 285:
		z.state = zBad
		return false
	case sym < 256:
		z.drop(n)
		z.out++
		return true
	case sym == 256:
		z.drop(n)
		z.blockEnd()
		return true
	}
	i := sym - 257
	e := uint(lenExtra[i])
	if n+e > z.nb {
		return false
	}
	length := uint64(lenBase[i]) + (z.acc>>n)&(1<<e-1)
	n += e
	ds, dn := dist.decode(z.acc>>n, z.nb-n)
	switch {
	case dn == 0:
		return false
	case ds < 0 || ds >= 30:
		z.state = zBad
		return false
	}
	n += dn
	if n+uint(distExtra[ds]) > z.nb {
		return false
	}
	z.drop(n + uint(distExtra[ds]))
	z.out += length
	return true
}

// Inflaters is a pool of counting inflaters a Config's connections share:
// one is held only while a compressed client message is in flight.
type Inflaters struct{ p sync.Pool }

func (ps *Inflaters) get() *inflater {
	if ps != nil {
		if z, ok := ps.p.Get().(*inflater); ok {
			return z
		}
	}
	return new(inflater)
}

func (ps *Inflaters) put(z *inflater) {
	if ps != nil {
		z.reset()
		ps.p.Put(z)
	}
}

package wsession

import "sync"

// The counting inflater: how many bytes a raw DEFLATE stream (RFC 1951)
// inflates to, without producing them.
//
// Counting needs no LZ77 window: a literal is one byte, a match is its
// length, whatever it copies. So an inflater that only counts holds the
// bit reader and the Huffman codes of the current block (2.2 KiB)
// and no 32 KiB window, and a permessage-deflate message (RFC 7692 §7.2.1)
// always ends at a block boundary on a byte (the sender flushes and drops
// the empty stored block's 0x00 0x00 0xff 0xff), so nothing is carried
// from one message to the next, context takeover or not: an idle
// connection holds no inflater at all. A match may reach back into
// earlier messages (context takeover): its length still counts, and the
// backend, which holds the window, judges the distance.
//
// The input arrives in the pieces the socket reads give, masked
// (RFC 6455 §5.3): every step (a block header, one code length, one
// literal or one length/distance pair, at most 48 bits) is decoded only
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

// huffman is a canonical Huffman code as counts per length and symbols in
// code order, decoded bit by bit (as zlib's puff.c does): small, built in
// one pass, and fast enough to count.
type huffman struct {
	count [maxBits + 1]uint16
	sym   [maxLit]uint16
}

// build makes h the code with the code lengths lens, and reports whether
// it is usable: not over-subscribed, and complete unless it has a single
// code (RFC 1951 allows one distance code of one bit).
func (h *huffman) build(lens []uint8) bool {
	h.count = [maxBits + 1]uint16{}
	for _, l := range lens {
		h.count[l]++
	}
	if int(h.count[0]) == len(lens) {
		return true // no codes: only valid if never used (decode fails)
	}
	left := 1
	for l := 1; l <= maxBits; l++ {
		left = left<<1 - int(h.count[l])
		if left < 0 {
			return false
		}
	}
	var offs [maxBits + 1]uint16
	for l := 1; l < maxBits; l++ {
		offs[l+1] = offs[l] + h.count[l]
	}
	for s, l := range lens {
		if l != 0 {
			h.sym[offs[l]] = uint16(s)
			offs[l]++
		}
	}
	// An incomplete code is only allowed for a single code of length 1.
	return left == 0 || (h.count[0] == uint16(len(lens)-1) && h.count[1] == 1)
}

// decode reads one symbol from the nb bits of acc (LSB first) and returns
// it with its length; n 0: more bits are needed; sym -1: no such code.
func (h *huffman) decode(acc uint64, nb uint) (sym int, n uint) {
	code, first, index := 0, 0, 0
	for l := uint(1); l <= maxBits; l++ {
		if l > nb {
			return 0, 0
		}
		code |= int(acc>>(l-1)) & 1
		count := int(h.count[l])
		if code-count < first {
			return int(h.sym[index+code-first]), l
		}
		index += count
		first = (first + count) << 1
		code <<= 1
	}
	return -1, maxBits
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

// fixedLit and fixedDist are the codes of a fixed-Huffman block (§3.2.6),
// built once per inflater the first time one is met.
func fixedLens() (lit [maxLit]uint8, dist [30]uint8) {
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
	for i := range dist {
		dist[i] = 5
	}
	return lit, dist
}

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
	fixed  bool   // lit and dist hold the fixed codes (§3.2.6); kept across reset

	hlit, hdist, hclen, n int
	lens                  [maxLit + maxDist]uint8
	clen, lit, dist       huffman
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
			// No step needs more than 48 bits: unreachable, but never loop.
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
		z.n, z.lens = 0, [maxLit + maxDist]uint8{}
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
		if !z.fixed {
			// Built once per pooled inflater, until a dynamic block
			// replaces them.
			lit, dist := fixedLens()
			z.lit.build(lit[:])
			z.dist.build(dist[:])
			z.fixed = true
		}
		z.state = zData
	case 2:
		z.state = zTable
	default:
		z.state = zBad
		return false
	}
	return true
}

// codeLen reads one length of the code length code (§3.2.7).
func (z *inflater) codeLen() bool {
	if z.nb < 3 {
		return false
	}
	z.lens[clenOrder[z.n]] = uint8(z.acc & 7)
	z.drop(3)
	if z.n++; z.n < z.hclen {
		return true
	}
	if !z.clen.build(z.lens[:numCLens]) {
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
	for range rep {
		z.lens[z.n] = val
		z.n++
	}
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
	sym, n := z.lit.decode(z.acc, z.nb)
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
	ds, dn := z.dist.decode(z.acc>>n, z.nb-n)
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

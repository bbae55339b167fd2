package proxy

import (
	"crypto/rand"
	"errors"
)

// RFC 6455 §5.2 opcodes used by the proxy.
const (
	opClose = 0x8
	opPing  = 0x9
)

// maxFrameHeader is the longest frame header: 2 bytes, 8 bytes of extended
// length and a 4-byte masking key (RFC 6455 §5.2).
const maxFrameHeader = 14

// errFrameLength reports a 64-bit payload length with its most significant
// bit set, which RFC 6455 §5.2 forbids.
var errFrameLength = errors.New("websocket frame: 64-bit length has the most significant bit set")

// frameHeader is the part of an RFC 6455 §5.2 frame header the proxy needs.
type frameHeader struct {
	fin    bool
	opcode byte
	masked bool
	length uint64 // payload length
	size   int    // header length in bytes, 2..14
}

// parseFrameHeader parses the frame header at the start of b. It returns
// size 0 and no error when b does not yet hold the whole header. Server
// frames are unmasked, but the mask bit is honoured anyway so the parser
// also works on client frames.
func parseFrameHeader(b []byte) (frameHeader, error) {
	var h frameHeader
	if len(b) < 2 {
		return h, nil
	}
	h.fin = b[0]&0x80 != 0
	h.opcode = b[0] & 0x0f
	h.masked = b[1]&0x80 != 0
	size := 2
	switch l := b[1] & 0x7f; l {
	case 126:
		size += 2
		if len(b) < size {
			return frameHeader{}, nil
		}
		h.length = uint64(b[2])<<8 | uint64(b[3])
	case 127:
		size += 8
		if len(b) < size {
			return frameHeader{}, nil
		}
		if b[2]&0x80 != 0 {
			return frameHeader{}, errFrameLength
		}
		for _, c := range b[2:10] {
			h.length = h.length<<8 | uint64(c)
		}
	default:
		h.length = uint64(l)
	}
	if h.masked {
		size += 4
	}
	if len(b) < size {
		return frameHeader{}, nil
	}
	h.size = size
	return h, nil
}

// frameTracker follows frame boundaries in one direction of a WebSocket
// stream fed in arbitrary chunks, so that a close frame can be injected
// between two frames and never inside one. Control frames may be injected
// between the fragments of a message (RFC 6455 §5.4), so every frame
// boundary is a safe point.
type frameTracker struct {
	hdr       [maxFrameHeader]byte // partial header carried across chunks
	closeSeen bool                 // a close frame header went by
	broken    bool                 // framing lost; boundaries unknown
	hn        int                  // bytes in hdr
	remaining uint64               // payload bytes left in the current frame

	// Frame-aware mode: limit bounds a frame's payload length (0: none).
	// A header over it stops the tracker for good (tooBig); split says
	// that bytes of that header went by in an earlier chunk.
	limit  uint64
	tooBig bool
	split  bool

	// msgLimit bounds the sum of the payload lengths of one message's
	// data frames, continuation frames included (0: none); msgLen is that
	// sum so far. A header taking it over msgLimit stops the tracker like
	// one over limit, with tooBigMsg set.
	msgLimit  uint64
	msgLen    uint64
	tooBigMsg bool

	// onClose, when set, learns the status code of the first close frame
	// (RFC 6455 §5.5.1: its first two payload bytes, unmasked;
	// closeNoStatus when it has none) as soon as the code has gone by.
	onClose   func(code int)
	closing   bool // reading the first close frame's code
	closeDone bool // the first close frame's code was reported
	masked    bool
	closeN    int
	closeMask [4]byte
	closeBuf  [2]byte
}

// atBoundary reports whether the stream is between two frames.
func (t *frameTracker) atBoundary() bool {
	return !t.broken && !t.tooBig && t.hn == 0 && t.remaining == 0
}

// feed consumes p. When stop is true it stops right after the first frame
// that ends inside p and returns how many bytes that is; otherwise, or when
// no frame ends in p, it returns len(p). After a framing error the tracker is
// broken and consumes everything. A header announcing more than limit
// payload bytes is judged as soon as it is parsed, before any of the
// payload arrives: feed returns the offset of that header in p (0 when it
// began in an earlier chunk) and consumes nothing from then on.
func (t *frameTracker) feed(p []byte, stop bool) int {
	if t.tooBig {
		return 0
	}
	i := 0
	for i < len(p) && !t.broken {
		if t.remaining > 0 {
			k := uint64(len(p) - i)
			if k > t.remaining {
				k = t.remaining
			}
			if t.closing {
				t.closeBytes(p[i : i+int(k)])
			}
			i += int(k)
			t.remaining -= k
			if t.remaining == 0 && stop {
				return i
			}
			continue
		}
		// Collect header bytes: copy what may belong to the header, parse,
		// and hand back whatever turned out to be payload.
		before := t.hn
		k := copy(t.hdr[t.hn:], p[i:])
		t.hn += k
		h, err := parseFrameHeader(t.hdr[:t.hn])
		if err != nil {
			t.broken = true
			return len(p)
		}
		if h.size == 0 {
			i += k
			continue
		}
		if t.over(h) {
			t.tooBig, t.split = true, before > 0
			t.hn = 0
			return i
		}
		i += h.size - before
		t.hn = 0
		t.remaining = h.length
		if h.opcode == opClose {
			t.closeSeen = true
			t.closeStart(h, t.hdr[:h.size])
		}
		if t.remaining == 0 && stop {
			return i
		}
	}
	return len(p)
}

// closeFrame returns an unmasked server close frame with the status code
// (RFC 6455 §5.5.1) and no reason.
func closeFrame(code int) []byte {
	return []byte{0x80 | opClose, 2, byte(code >> 8), byte(code)}
}

// pingFrame returns an unmasked server ping with no payload
// (RFC 6455 §5.5.2).
func pingFrame() []byte {
	return []byte{0x80 | opPing, 0}
}

// maskedCloseFrame returns a client close frame with the status code: a
// frame the proxy sends to a backend must be masked (RFC 6455 §5.3).
func maskedCloseFrame(code int) []byte {
	var k [4]byte
	rand.Read(k[:])
	return []byte{0x80 | opClose, 0x80 | 2, k[0], k[1], k[2], k[3], byte(code>>8) ^ k[0], byte(code) ^ k[1]}
}

// over reports whether the frame with header h takes the stream over the
// frame limit or its message over the message limit, and counts it into
// the message otherwise.
func (t *frameTracker) over(h frameHeader) bool {
	if t.limit > 0 && h.length > t.limit {
		return true
	}
	if t.msgLimit == 0 || h.opcode >= opClose {
		// Control frames (opcodes with the high bit, RFC 6455 §5.5) are
		// not part of a message.
		return false
	}
	if h.opcode != 0 {
		// A non-continuation data frame starts a new message (§5.4).
		t.msgLen = 0
	}
	if h.length > t.msgLimit-t.msgLen {
		t.tooBigMsg = true
		return true
	}
	t.msgLen += h.length
	return false
}

// closeStart begins reading the code of the first close frame, whose
// header is h with its bytes hdr.
func (t *frameTracker) closeStart(h frameHeader, hdr []byte) {
	if t.onClose == nil || t.closeDone {
		return
	}
	switch h.length {
	case 0:
		t.closeReport(closeNoStatus)
		return
	case 1:
		// A one-byte body is no status code (RFC 6455 §5.5.1): protocol error.
		t.closeReport(1002)
		return
	}
	t.closing, t.closeN, t.masked = true, 0, h.masked
	if h.masked {
		copy(t.closeMask[:], hdr[len(hdr)-4:])
	}
}

// closeBytes takes payload bytes of the close frame whose code is read.
func (t *frameTracker) closeBytes(b []byte) {
	for _, v := range b {
		if t.masked {
			v ^= t.closeMask[t.closeN]
		}
		t.closeBuf[t.closeN] = v
		t.closeN++
		if t.closeN == 2 {
			t.closeReport(int(t.closeBuf[0])<<8 | int(t.closeBuf[1]))
			return
		}
	}
}

func (t *frameTracker) closeReport(code int) {
	t.closing, t.closeDone = false, true
	t.onClose(code)
}

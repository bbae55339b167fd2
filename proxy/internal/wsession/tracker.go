package wsession

import "github.com/edgelb/edge/internal/wswire"

// tracker follows frame boundaries in one direction of a WebSocket
// stream fed in arbitrary chunks, so that a control frame can be injected
// between two frames and never inside one. Control frames may be injected
// between the fragments of a message (RFC 6455 §5.4), so every frame
// boundary is a safe point. It reads headers, never buffers payloads.
type tracker struct {
	// The byte arrays and flags first, together, so the struct has no
	// padding: every connection holds one (two when frame-aware).
	hdr       [wswire.MaxHeader]byte // partial header carried across chunks
	closeMask [4]byte
	closeBuf  [2]byte
	closeSeen bool // a close frame header went by
	broken    bool // framing lost; boundaries unknown
	tooBig    bool // see limit
	split     bool // see limit
	tooBigMsg bool // see msgLimit
	inflated  bool // tooBigMsg: inflated, counted by feedCounting's zcount
	// The status code of the first close frame (RFC 6455 §5.5.1: its
	// first two payload bytes, unmasked; CloseNoStatus when it has none),
	// in code once closeDone; noted tells the session it was taken.
	closing   bool // reading the first close frame's code
	closeDone bool
	noted     bool
	masked    bool

	hn        int    // bytes in hdr
	remaining uint64 // payload bytes left in the current frame

	// limit bounds a frame's payload length (0: none). A header over it
	// stops the tracker for good (tooBig); split says that bytes of that
	// header went by in an earlier chunk.
	limit uint64

	// msgLimit bounds the sum of the payload lengths of one message's
	// data frames, continuation frames included (0: none); msgLen is that
	// sum so far. A header taking it over msgLimit stops the tracker like
	// one over limit, with tooBigMsg set.
	msgLimit uint64
	msgLen   uint64

	closeN int
	code   int
}

// atBoundary reports whether the stream is between two frames.
func (t *tracker) atBoundary() bool {
	return !t.broken && !t.tooBig && t.hn == 0 && t.remaining == 0
}

// newClose returns the code of the first close frame once, the first
// time it is asked after the code went by.
func (t *tracker) newClose() (int, bool) {
	if !t.closeDone || t.noted {
		return 0, false
	}
	t.noted = true
	return t.code, true
}

// feed consumes p. When stop is true it stops right after the first frame
// that ends inside p and returns how many bytes that is; otherwise, or when
// no frame ends in p, it returns len(p). After a framing error the tracker is
// broken and consumes everything. A header announcing more than limit
// payload bytes is judged as soon as it is parsed, before any of the
// payload arrives: feed returns the offset of that header in p (0 when it
// began in an earlier chunk) and consumes nothing from then on.
func (t *tracker) feed(p []byte, stop bool) int { return t.feedCounting(p, stop, nil, 0, nil, nil) }

// feedCounting is feed that also counts the inflated size of compressed
// messages with z (nil: none) against limit: the first payload byte that
// could take a message past it stops the tracker like a header over the
// limit does (tooBig and tooBigMsg, inflated, split), and feedCounting
// returns its offset in p. starts, when not nil, is incremented at the
// header of every data frame that starts a message (RFC 6455 §5.4) and of
// every control frame.
func (t *tracker) feedCounting(p []byte, stop bool, z *zcount, limit uint64, ps *Inflaters, starts *int) int {
	c := counting{z: z, limit: limit, ps: ps, starts: starts}
	return t.feedWith(p, stop, &c)
}

// feedWith is feedCounting with what it counts in c, which also counts
// the ping and pong headers that went by and, with c.dropPong, stops
// right after the first whole empty masked pong that starts at a frame
// boundary in p (c.dropAt its offset; it went through the tracker like
// any other frame).
func (t *tracker) feedWith(p []byte, stop bool, c *counting) int {
	if t.tooBig {
		return 0
	}
	i := 0
	for i < len(p) && !t.broken {
		var n int
		var done bool
		switch {
		case t.remaining > 0:
			n, done = t.feedPayload(p[i:], stop, c)
		case c.dropPong && t.hn == 0 && isEmptyPong(p[i:]):
			n, _ = t.feedHeader(p[i:i+len(emptyPong)], false, c)
			c.dropAt, done = i, true
		default:
			n, done = t.feedHeader(p[i:], stop, c)
		}
		i += n
		if done {
			return i
		}
	}
	return len(p)
}

// counting is what feedCounting counts with, passed down to its two steps.
type counting struct {
	z      *zcount // nil: no inflated count
	limit  uint64
	ps     *Inflaters
	starts *int // nil: no count of message starts

	pings, pongs int    // ping and pong headers that went by
	seen         uint32 // the backend's pings counted before (pong.go)
	dropPong     bool   // stop after a whole empty pong at a boundary
	dropAt       int    // offset of that pong; -1: none
}

// feedPayload consumes payload bytes of the current frame from p and
// returns how many, and whether feedCounting stops there: stop asked and
// the frame ended, or the inflated count went over its limit.
func (t *tracker) feedPayload(p []byte, stop bool, c *counting) (int, bool) {
	k := min(uint64(len(p)), t.remaining)
	if t.closing {
		t.closeBytes(p[:k])
	}
	if c.z != nil {
		if keep, over := c.z.payload(p[:k], c.limit, c.ps); over {
			t.tooBig, t.tooBigMsg, t.inflated, t.split = true, true, true, true
			return keep, true
		}
	}
	t.remaining -= k
	if t.remaining == 0 && c.z != nil && c.z.frameEnd(c.ps, c.limit) {
		// Between two frames: the backend's stream can end with a close.
		t.tooBig, t.tooBigMsg, t.inflated = true, true, true
		return int(k), true
	}
	return int(k), t.remaining == 0 && stop
}

// feedHeader collects header bytes from p (copying what may belong to the
// header, parsing, and handing back whatever turned out to be payload)
// and returns how many bytes were header, and whether feedCounting stops
// there: a framing error (everything consumed), a frame over a limit
// (nothing of it consumed), or stop asked and the frame ended.
func (t *tracker) feedHeader(p []byte, stop bool, c *counting) (int, bool) {
	before := t.hn
	k := copy(t.hdr[t.hn:], p)
	t.hn += k
	h, err := wswire.ParseHeader(t.hdr[:t.hn])
	if err != nil {
		t.broken = true
		return len(p), true
	}
	if h.Size == 0 {
		return k, false
	}
	if t.over(h) {
		t.tooBig, t.split = true, before > 0
		t.hn = 0
		return 0, true
	}
	n := h.Size - before
	t.hn = 0
	t.remaining = h.Length
	if c.starts != nil && h.Opcode != wswire.OpContinuation {
		// Control frames count too: no part of a message (RFC 6455
		// §5.5), but each one is work for the backend (a ping a pong),
		// and a client sending only pings must not escape the rate.
		*c.starts++
	}
	if c.z != nil {
		c.z.frame(h.Fin, h.Rsv1, h.Opcode, h.IsControl(), t.hdr[h.Size-4*b2i(h.Masked):h.Size])
		if h.Length == 0 && c.z.frameEnd(c.ps, c.limit) {
			// Between two frames: the backend's stream can end with a close.
			t.tooBig, t.tooBigMsg, t.inflated = true, true, true
			return n, true
		}
	}
	switch h.Opcode {
	case wswire.OpPing:
		c.pings++
	case wswire.OpPong:
		c.pongs++
	}
	if h.Opcode == wswire.OpClose {
		t.closeSeen = true
		t.closeStart(h, t.hdr[:h.Size])
	}
	return n, t.remaining == 0 && stop
}

// over reports whether the frame with header h takes the stream over the
// frame limit or its message over the message limit, and counts it into
// the message otherwise.
func (t *tracker) over(h wswire.Header) bool {
	if t.limit > 0 && h.Length > t.limit {
		return true
	}
	if t.msgLimit == 0 || h.IsControl() {
		// Control frames (RFC 6455 §5.5) are not part of a message.
		return false
	}
	if h.Opcode != wswire.OpContinuation {
		// A non-continuation data frame starts a new message (§5.4).
		t.msgLen = 0
	}
	if h.Length > t.msgLimit-t.msgLen {
		t.tooBigMsg = true
		return true
	}
	t.msgLen += h.Length
	return false
}

// closeStart begins reading the code of the first close frame, whose
// header is h with its bytes hdr.
func (t *tracker) closeStart(h wswire.Header, hdr []byte) {
	if t.closeDone {
		return
	}
	switch h.Length {
	case 0:
		t.closeReport(CloseNoStatus)
		return
	case 1:
		// A one-byte body is no status code (RFC 6455 §5.5.1): protocol error.
		t.closeReport(CloseProtocolError)
		return
	}
	t.closing, t.closeN, t.masked = true, 0, h.Masked
	if h.Masked {
		copy(t.closeMask[:], hdr[len(hdr)-4:])
	}
}

// closeBytes takes payload bytes of the close frame whose code is read.
func (t *tracker) closeBytes(b []byte) {
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

func (t *tracker) closeReport(code int) {
	t.closing, t.closeDone, t.code = false, true, code
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

package wsession

import "github.com/edgelb/edge/internal/wswire"

// tracker follows frame boundaries in one direction of a WebSocket
// stream fed in arbitrary chunks, so that a control frame can be injected
// between two frames and never inside one. Control frames may be injected
// between the fragments of a message (RFC 6455 §5.4), so every frame
// boundary is a safe point. It reads headers, never buffers payloads, and
// judges every header by the rules of strict.go: a frame that breaks one
// stops the tracker at its header (bad).
type tracker struct {
	// The byte arrays and flags first, together, so the struct has no
	// padding: every connection holds one (two when frame-aware).
	hdr       [wswire.MaxHeader]byte // partial header carried across chunks
	closeMask [4]byte
	closeBuf  [2]byte
	closeSeen bool // a close frame header went by
	broken    bool // stopped inside a frame (bad, its header began in an earlier chunk): boundaries unknown
	tooBig    bool // see limit
	split     bool // see limit
	tooBigMsg bool // see msgLimit
	inflated  bool // tooBigMsg: inflated, counted by feedCounting's zcount
	// The status code of the first close frame (RFC 6455 §5.5.1: its
	// first two payload bytes, unmasked; CloseNoStatus when it has none),
	// in code once closeDone; noted tells the session it was taken.
	// closing: a close frame's code is being read (every close frame's,
	// to judge it; only the first one's is reported).
	closing   bool
	closeDone bool
	noted     bool
	masked    bool

	// Strict framing (strict.go). frag: a data message is unfinished, the
	// next data frame must continue it; fragUnknown: whether one is, is
	// not known (a session restored from a record that did not say), and
	// the next data frame's opcode tells. bad: a frame broke a rule, and
	// the tracker stopped at its header (fault says which rule). rsv:
	// the RSV bits the connection's extensions may set.
	frag        bool
	fragUnknown bool
	bad         bool
	fault       fault
	rsv         uint8

	hn     uint8  // bytes in hdr
	closeN uint8  // bytes of the close code read
	code   uint16 // see closeDone

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
}

// atBoundary reports whether the stream is between two frames.
func (t *tracker) atBoundary() bool {
	return !t.broken && !t.tooBig && t.hn == 0 && t.remaining == 0
}

// stopped reports a tracker that consumes nothing more: a frame over a
// limit, or one that broke a rule.
func (t *tracker) stopped() bool { return t.tooBig || t.bad }

// newClose returns the code of the first close frame once, the first
// time it is asked after the code went by.
func (t *tracker) newClose() (int, bool) {
	if !t.closeDone || t.noted {
		return 0, false
	}
	t.noted = true
	return int(t.code), true
}

// feed consumes p, server frames. When stop is true it stops right after
// the first frame that ends inside p and returns how many bytes that is;
// otherwise, or when no frame ends in p, it returns len(p). A header
// announcing more than limit payload bytes is judged as soon as it is
// parsed, before any of the payload arrives, and a header that breaks a
// rule of strict.go as soon as its first bad byte is there: feed returns
// the offset of that header in p (0 when it began in an earlier chunk)
// and consumes nothing from then on.
func (t *tracker) feed(p []byte, stop bool) int {
	return t.feedWith(p, stop, &counting{frames: -1, budget: -1})
}

// counting is what feedWith counts with, passed down to its steps.
type counting struct {
	client bool    // the client's frames: masked (RFC 6455 §5.1)
	z      *zcount // nil: no inflated count
	limit  uint64
	ps     *Inflaters

	// frames counts the headers of every frame that went by (data,
	// continuation and control alike: each is work for the backend, and
	// an empty continuation is no less a frame); -1: not counted. budget,
	// when >= 0, is how many frames may go by: the header of the next
	// one stops feedWith before it (rateOver; rateSplit when bytes of
	// that header went by in an earlier chunk).
	frames    int
	budget    int
	rateOver  bool
	rateSplit bool

	pings, pongs int    // ping and pong headers that went by
	seen         uint32 // the backend's pings counted before (pong.go)
	dropPong     bool   // stop after a whole empty pong at a boundary
	dropAt       int    // offset of that pong; -1: none

	// frameAt is the offset in p of the current frame's header; -1: it
	// began in an earlier chunk.
	frameAt int
}

// feedWith consumes p as feed does, counting with c: the inflated size
// of compressed messages with c.z against c.limit (the first payload
// byte that could take a message past it stops the tracker like a header
// over the limit does: tooBig and tooBigMsg, inflated, split, and
// feedWith returns its offset in p), the frames against c.budget, the
// ping and pong headers that went by and, with c.dropPong, it stops right
// after the first whole empty masked pong that starts at a frame boundary
// in p (c.dropAt its offset; it went through the tracker like any other
// frame).
func (t *tracker) feedWith(p []byte, stop bool, c *counting) int {
	if t.stopped() {
		return 0
	}
	c.frameAt = -1
	i := 0
	for i < len(p) {
		var n int
		var done bool
		switch {
		case t.remaining > 0:
			n, done = t.feedPayload(p[i:], stop, c)
		case c.dropPong && t.hn == 0 && isEmptyPong(p[i:]):
			c.frameAt = i
			n, done = t.feedHeader(p[i:i+len(emptyPong)], false, c)
			if !t.stopped() && !c.rateOver {
				c.dropAt, done = i, true
			}
		default:
			if t.hn == 0 {
				c.frameAt = i
			}
			n, done = t.feedHeader(p[i:], stop, c)
		}
		i += n
		if t.bad {
			return t.refuse(c)
		}
		if done {
			return i
		}
	}
	return len(p)
}

// refuse stops the tracker at the header of the frame that broke a rule
// and returns its offset in the chunk: 0, and the boundaries lost
// (broken), when the header began in an earlier one.
func (t *tracker) refuse(c *counting) int {
	t.hn, t.remaining, t.closing = 0, 0, false
	if c.frameAt < 0 {
		t.broken = true
		return 0
	}
	return c.frameAt
}

// feedPayload consumes payload bytes of the current frame from p and
// returns how many, and whether feedWith stops there: stop asked and the
// frame ended, or the inflated count went over its limit.
func (t *tracker) feedPayload(p []byte, stop bool, c *counting) (int, bool) {
	k := min(uint64(len(p)), t.remaining)
	if t.closing && t.closeBytes(p[:k]) {
		return int(k), true
	}
	if c.z != nil {
		if keep, over := c.z.payload(p[:k], k == t.remaining, c.limit, c.ps); over {
			t.tooBig, t.tooBigMsg, t.inflated, t.split = true, true, true, true
			return keep, true
		}
	}
	t.remaining -= k
	if t.remaining == 0 && c.z != nil {
		c.z.frameEnd(c.ps)
	}
	return int(k), t.remaining == 0 && stop
}

// feedHeader collects header bytes from p (copying what may belong to the
// header, judging, parsing, and handing back whatever turned out to be
// payload) and returns how many bytes were header, and whether feedWith
// stops there: a frame that broke a rule (bad), a frame over a limit or
// the frame budget (nothing of it consumed), or stop asked and the frame
// ended. It runs once a frame; start takes an admitted frame on.
func (t *tracker) feedHeader(p []byte, stop bool, c *counting) (int, bool) {
	before := int(t.hn)
	k := copy(t.hdr[t.hn:], p)
	t.hn += uint8(k)
	if f := headerFault(t.hdr[:t.hn], c.client, t.rsv, t.frag, t.fragUnknown); f != faultNone {
		return t.fail(f)
	}
	h, err := wswire.ParseHeader(t.hdr[:t.hn])
	switch {
	case err != nil:
		return t.fail(faultLength)
	case h.Size == 0:
		return k, false
	case h.Opcode == wswire.OpClose && h.Length >= 2 && before == 0 && len(p) >= h.Size+2 && !t.closeCodeOK(h, p[h.Size:h.Size+2]):
		// The code is in the chunk: judged before the header goes on.
		return t.fail(faultCloseCode)
	case t.over(h):
		t.tooBig, t.split = true, before > 0
		t.hn = 0
		return 0, true
	case c.budget >= 0 && c.frames >= c.budget:
		c.rateOver, c.rateSplit = true, before > 0
		t.hn = 0
		return 0, true
	}
	if c.z != nil && h.Opcode < wswire.OpClose && h.Fin && h.Length == 0 && c.z.emptyEnd(h.Rsv1, h.Opcode, c.limit, c.ps) {
		// The tail of a compressed message (RFC 7692 §7.2.2) took it
		// over the limit: its last frame, empty, does not go on.
		t.tooBig, t.tooBigMsg, t.inflated, t.split = true, true, true, before > 0
		t.hn = 0
		return 0, true
	}
	t.hn = 0
	t.start(&h, c)
	return h.Size - before, t.remaining == 0 && stop
}

// start begins the frame whose header h was admitted: its payload to
// come, its count, where its message stands, the inflater's view of it
// and what a control frame asks.
func (t *tracker) start(h *wswire.Header, c *counting) {
	control := h.Opcode >= wswire.OpClose
	t.remaining = h.Length
	if c.frames >= 0 {
		c.frames++
	}
	if !control {
		// RFC 6455 §5.4: a data frame without FIN leaves its message open.
		t.frag, t.fragUnknown = !h.Fin, false
	}
	if c.z != nil {
		c.z.frame(h.Fin, h.Rsv1, h.Opcode, control, t.hdr[h.Size-4*b2i(h.Masked):h.Size])
		if h.Length == 0 {
			c.z.frameEnd(c.ps)
		}
	}
	switch h.Opcode {
	case wswire.OpPing:
		c.pings++
	case wswire.OpPong:
		c.pongs++
	case wswire.OpClose:
		t.closeSeen = true
		t.closeStart(*h, t.hdr[:h.Size])
	}
}

// fail stops the tracker at a frame that broke the rule f.
func (t *tracker) fail(f fault) (int, bool) {
	t.bad, t.fault = true, f
	return 0, true
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

// closeStart begins reading the code of a close frame, whose header is h
// with its bytes hdr: every close frame's, to judge it (closeBytes), the
// first one's to report.
func (t *tracker) closeStart(h wswire.Header, hdr []byte) {
	if h.Length == 0 {
		t.closeReport(CloseNoStatus)
		return
	}
	t.closing, t.closeN, t.masked = true, 0, h.Masked
	if h.Masked {
		copy(t.closeMask[:], hdr[len(hdr)-4:])
	}
}

// closeBytes takes payload bytes of the close frame whose code is read,
// and reports a code that may not be sent (the tracker is then bad).
func (t *tracker) closeBytes(b []byte) bool {
	for _, v := range b {
		if t.masked {
			v ^= t.closeMask[t.closeN]
		}
		t.closeBuf[t.closeN] = v
		t.closeN++
		if t.closeN == 2 {
			code := int(t.closeBuf[0])<<8 | int(t.closeBuf[1])
			if !sendableCloseCode(code) {
				t.fail(faultCloseCode)
				return true
			}
			t.closeReport(code)
			return false
		}
	}
	return false
}

// closeCodeOK judges the code whose two payload bytes are b in the close
// frame with header h (and its bytes in t.hdr).
func (t *tracker) closeCodeOK(h wswire.Header, b []byte) bool {
	c0, c1 := b[0], b[1]
	if h.Masked {
		m := t.hdr[h.Size-4 : h.Size]
		c0, c1 = c0^m[0], c1^m[1]
	}
	return sendableCloseCode(int(c0)<<8 | int(c1))
}

func (t *tracker) closeReport(code int) {
	t.closing = false
	if !t.closeDone {
		t.closeDone, t.code = true, uint16(code)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

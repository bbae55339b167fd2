package wsession

// zcount counts the inflated size of the client's compressed messages
// (permessage-deflate, RFC 7692) against the message limit. It lives in
// the frame-aware part of a session; its inflater is taken from the
// Config's pool at a compressed message's first payload byte and given
// back at its end, so an idle connection holds none.
type zcount struct {
	negotiated bool // permessage-deflate was negotiated
	on         bool // and RSV1 messages are counted
	data       bool // the current frame is a data frame
	comp       bool // the current message is compressed (RSV1 on its first frame, §6)
	fin        bool // the current frame ends its message
	bad        bool // a compressed message was no DEFLATE stream
	pos        uint8
	mask       [4]byte

	z *inflater // only while a compressed message is in flight

	// Totals for the connection's compressed messages: wire payload bytes
	// and what they inflated to (counted up to the limit).
	wire, inflated uint64
}

// frame starts the frame with header h, whose masking key is mask.
func (c *zcount) frame(fin, rsv1 bool, opcode byte, control bool, mask []byte) {
	c.data = !control
	if control {
		return
	}
	c.fin, c.pos = fin, 0
	copy(c.mask[:], mask)
	if opcode != 0 {
		// A new message (§6: RSV1 only on its first frame).
		c.comp = c.on && rsv1
	}
}

// payload counts payload bytes p of the current frame; last says that
// they end it. It returns how many may go on and whether the message went
// over limit (or was no DEFLATE, bad). The tail a receiver appends to a
// message (RFC 7692 §7.2.2) inflates too: it is counted with the last
// bytes of the final frame, and when it takes the message over (or the
// message does not end where the next can start) the last byte stays
// back, so no receiver ever holds the whole message.
func (c *zcount) payload(p []byte, last bool, limit uint64, ps *Inflaters) (keep int, over bool) {
	if !c.data || !c.comp || len(p) == 0 {
		return len(p), false
	}
	if c.z == nil {
		c.z = ps.get()
	}
	before := c.z.out
	keep, r := c.z.feed(p, c.mask, int(c.pos), limit)
	c.pos = uint8((int(c.pos) + len(p)) & 3)
	c.wire += uint64(keep)
	c.inflated += min(c.z.out, limit) - min(before, limit)
	switch r {
	case feedOver:
		return keep, true
	case feedBad:
		c.bad = true
		return 0, true
	}
	if last && c.fin && c.tail(limit) {
		return len(p) - 1, true
	}
	return len(p), false
}

// tail feeds the compressed message's tail (inflater.finish) and reports
// whether the message cannot go on: over limit with it, or ended where
// the next message cannot start (bad).
func (c *zcount) tail(limit uint64) (stop bool) {
	before := c.z.out
	ok := c.z.finish(limit)
	c.inflated += min(c.z.out, limit) - min(before, limit)
	switch {
	case c.z.out > limit:
		return true
	case !ok:
		c.bad = true
		return true
	}
	return false
}

// emptyEnd judges a final data frame without payload, with RSV1 rsv1 and
// opcode, before it goes on: when it ends a compressed message, that
// message's tail is counted now. It reports that the frame must not go
// on (tail's stop).
func (c *zcount) emptyEnd(rsv1 bool, opcode byte, limit uint64, ps *Inflaters) bool {
	comp := c.comp
	if opcode != 0 {
		comp = c.on && rsv1
	}
	if !comp {
		return false
	}
	if c.z == nil {
		c.z = ps.get()
	}
	return c.tail(limit)
}

// frameEnd ends the current frame; the message ends with a final one,
// its tail already counted (payload, emptyEnd).
func (c *zcount) frameEnd(ps *Inflaters) {
	if !c.data || !c.fin {
		return
	}
	c.comp = false
	c.release(ps)
}

// inFlight reports a compressed message under way, whose inflater state
// is mid-stream.
func (c *zcount) inFlight() bool { return c.comp || c.z != nil }

// release gives back the inflater of a message that will not go on.
func (c *zcount) release(ps *Inflaters) {
	if c.z != nil {
		ps.put(c.z)
		c.z = nil
	}
}

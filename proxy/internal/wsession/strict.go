package wsession

// Strict framing: every frame edge forwards is one RFC 6455 and RFC 7692
// allow.
//
// A receiver that is lenient where the RFCs say "MUST fail the
// connection" assembles messages its own way: aiohttp 3.8, for one,
// unmasks a client frame only when its MASK bit is set, takes RSV1 afresh
// on any frame after a FIN (a ping included) and appends any non-final
// data frame to the message under way, whatever its opcode. edge counts
// message sizes, inflated sizes and rates the way a strict receiver
// assembles the stream; were it to forward a frame that breaks the rules,
// a lenient backend would assemble something edge never counted (a
// 20 MiB message through a 64 KiB limit). So the tracker judges every
// header as it reads it, from its first byte on, and a frame that breaks
// a rule is refused before any of its bytes go on: the stream stops at
// its header (at the first byte of it that is in the chunk at hand, when
// the header began in an earlier one), the sender gets a close frame and
// the other side nothing more of it.
//
// The rules (every one a "MUST" of the RFCs):
//   - a client masks every frame, a server none (RFC 6455 §5.1);
//   - RSV bits only for an extension negotiated on this connection
//     (§5.2); under permessage-deflate, RSV1 only on the first frame of a
//     data message, never on a continuation or control frame (RFC 7692
//     §6, §6.1); an extension edge does not know leaves the RSV bits
//     unjudged (its meaning of them is not edge's to know);
//   - no reserved opcode (§5.2);
//   - a continuation frame only inside a fragmented message, and no new
//     data frame before that message's final frame (§5.4);
//   - control frames final and at most 125 octets (§5.5);
//   - a close body of 0 or at least 2 octets, its code one that may be
//     sent (§5.5.1, §7.4.1, §7.4.2: not 1004-1006, 1015, below 1000, in
//     the unassigned 1016-2999 or at 5000 and above);
//   - a length in its minimal encoding, and no 64-bit length with the
//     most significant bit set (§5.2).

// RSV policies of a tracker: the RSV bits (of the first header byte) an
// extension negotiated on the connection may set.
const (
	rsvNone    uint8 = 0    // no extension: every RSV bit is refused
	rsvDeflate uint8 = 0x40 // permessage-deflate: RSV1 as RFC 7692 §6 says
	rsvAny     uint8 = 0x70 // an extension edge does not know: not judged
)

// fault is the rule a frame broke; 0: none.
type fault uint8

// Faults, in the order headerFault looks for them.
const (
	faultNone          fault = iota
	faultOpcode              // a reserved opcode (§5.2)
	faultControlFrag         // a control frame without FIN (§5.5)
	faultRSV                 // an RSV bit no extension of this connection sets (§5.2, RFC 7692 §6.1)
	faultContinuation        // a continuation frame outside a fragmented message (§5.4)
	faultNewMessage          // a data frame inside an unfinished message (§5.4)
	faultMask                // a client frame unmasked or a server frame masked (§5.1)
	faultControlLength       // a control frame over 125 octets (§5.5)
	faultCloseLength         // a close body of one octet (§5.5.1)
	faultLength              // a length not in its minimal encoding, or a 64-bit one with the top bit (§5.2)
	faultCloseCode           // a close code that may not be sent (§7.4)
)

var faultNames = [...]string{
	faultNone:          "",
	faultOpcode:        "reserved opcode",
	faultControlFrag:   "fragmented control frame",
	faultRSV:           "RSV bit without a negotiated extension",
	faultContinuation:  "continuation frame outside a fragmented message",
	faultNewMessage:    "data frame inside an unfinished message",
	faultMask:          "masking",
	faultControlLength: "control frame over 125 octets",
	faultCloseLength:   "one-octet close body",
	faultLength:        "length encoding",
	faultCloseCode:     "close code that may not be sent",
}

func (f fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "unknown"
}

// headerFault judges the header bytes h (at least one; possibly not the
// whole header yet) of a frame sent by a client (masked) or a server,
// under the RSV policy rsv, with frag the stream inside a fragmented
// message (fragUnknown: not known, judged from the next data frame on).
// It judges each byte as soon as it is there, so a header split over
// reads is refused at its first bad byte.
func headerFault(h []byte, client bool, rsv uint8, frag, fragUnknown bool) fault {
	b0 := h[0]
	if len(h) >= 2 && (b0 == 0x81 || b0 == 0x82) && !frag && h[1]&0x80 != 0 == client && h[1]&0x7f < 126 {
		// A whole text or binary message in one frame, no extension bit,
		// a 7-bit length: what nearly every frame is, judged at once.
		return faultNone
	}
	if f := firstByteFault(b0, rsv, frag, fragUnknown); f != faultNone || len(h) < 2 {
		return f
	}
	return secondByteFault(h, client)
}

// firstByteFault judges a header's first byte b0: its opcode, FIN on a
// control frame, the RSV bits under rsv, and where the frame stands in a
// fragmented message (RFC 6455 §5.2, §5.4, §5.5).
func firstByteFault(b0 byte, rsv uint8, frag, fragUnknown bool) fault {
	op := b0 & 0x0f
	control := op >= 0x8
	switch {
	case op > 0x2 && op < 0x8 || op > 0xA:
		return faultOpcode
	case control && b0&0x80 == 0:
		return faultControlFrag
	case rsv == rsvAny:
	case b0&0x70&^rsv != 0:
		return faultRSV
	case b0&0x40 != 0 && (control || op == 0):
		// RFC 7692 §6.1: not on control frames nor non-first fragments.
		return faultRSV
	}
	switch {
	case control || fragUnknown:
	case op == 0 && !frag:
		return faultContinuation
	case op != 0 && frag:
		return faultNewMessage
	}
	return faultNone
}

// secondByteFault judges the header bytes h from the second on: the mask
// bit of the sender's side, a control frame's and a close frame's length,
// and the length's encoding (RFC 6455 §5.1, §5.2, §5.5, §5.5.1).
func secondByteFault(h []byte, client bool) fault {
	op := h[0] & 0x0f
	l7 := h[1] & 0x7f
	switch {
	case h[1]&0x80 != 0 != client:
		return faultMask
	case op >= 0x8 && l7 > 125:
		return faultControlLength
	case op == 0x8 && l7 == 1:
		return faultCloseLength
	}
	return lengthFault(h, l7)
}

// lengthFault judges the extended length of the header bytes h whose
// 7-bit length is l7: the minimal encoding, and no 64-bit length with
// its most significant bit set (RFC 6455 §5.2).
func lengthFault(h []byte, l7 byte) fault {
	switch {
	case l7 == 126 && len(h) >= 4 && int(h[2])<<8|int(h[3]) < 126:
		return faultLength
	case l7 != 127:
		return faultNone
	case len(h) >= 3 && h[2]&0x80 != 0:
		return faultLength
	case len(h) >= 10:
		n := uint64(0)
		for _, c := range h[2:10] {
			n = n<<8 | uint64(c)
		}
		if n <= 0xffff {
			return faultLength
		}
	}
	return faultNone
}

// sendableCloseCode reports whether a close frame may carry code
// (RFC 6455 §7.4.1, §7.4.2 and the IANA registry: 1004, 1005, 1006 and
// 1015 are never sent, 1016-2999 are unassigned, 3000-4999 belong to
// libraries and applications).
func sendableCloseCode(code int) bool {
	switch {
	case code >= 3000 && code <= 4999:
		return true
	case code >= 1000 && code <= 1014:
		return code < 1004 || code > 1006
	}
	return false
}

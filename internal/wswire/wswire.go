// Package wswire is the RFC 6455 wire format edge speaks in more than one
// place: the handshake's GUID and accept key (§1.3, §4.2.2), the frame
// header codec (§5.2) and the few frames edge writes itself (close, ping,
// masked client frames). The proxy's splice, the health prober and the
// tests share it, so the three cannot drift apart. No I/O, no state.
package wswire

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
)

// GUID is the fixed GUID of RFC 6455 §1.3.
const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Opcodes (RFC 6455 §5.2).
const (
	OpContinuation = 0x0
	OpText         = 0x1
	OpBinary       = 0x2
	OpClose        = 0x8
	OpPing         = 0x9
	OpPong         = 0xA
)

// MaxHeader is the longest frame header: 2 bytes, 8 bytes of extended
// length and a 4-byte masking key (RFC 6455 §5.2).
const MaxHeader = 14

// MaxControlPayload bounds a control frame's payload (RFC 6455 §5.5).
const MaxControlPayload = 125

// ErrLength reports a 64-bit payload length with its most significant
// bit set, which RFC 6455 §5.2 forbids.
var ErrLength = errors.New("websocket frame: 64-bit length has the most significant bit set")

// AcceptKey computes Sec-WebSocket-Accept for a Sec-WebSocket-Key
// (RFC 6455 §4.2.2 item 5.4).
func AcceptKey(key string) string {
	h := sha1.New()
	h.Write([]byte(key))
	h.Write([]byte(GUID))
	var sum [sha1.Size]byte
	return base64.StdEncoding.EncodeToString(h.Sum(sum[:0]))
}

// Header is the part of an RFC 6455 §5.2 frame header edge needs.
type Header struct {
	Fin    bool
	Rsv1   bool // permessage-deflate's "Per-Message Compressed" bit (RFC 7692 §6)
	Opcode byte
	Masked bool
	Length uint64 // payload length
	Size   int    // header length in bytes, 2..14
}

// IsControl reports a control frame (opcodes with the high bit, §5.5).
func (h Header) IsControl() bool { return h.Opcode >= OpClose }

// ParseHeader parses the frame header at the start of b. It returns Size
// 0 and no error when b does not yet hold the whole header. The mask bit
// is honoured, so client and server frames parse alike.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < 2 {
		return h, nil
	}
	h.Fin = b[0]&0x80 != 0
	h.Rsv1 = b[0]&0x40 != 0
	h.Opcode = b[0] & 0x0f
	h.Masked = b[1]&0x80 != 0
	size := 2
	switch l := b[1] & 0x7f; l {
	case 126:
		size += 2
		if len(b) < size {
			return Header{}, nil
		}
		h.Length = uint64(b[2])<<8 | uint64(b[3])
	case 127:
		size += 8
		if len(b) < size {
			return Header{}, nil
		}
		if b[2]&0x80 != 0 {
			return Header{}, ErrLength
		}
		for _, c := range b[2:10] {
			h.Length = h.Length<<8 | uint64(c)
		}
	default:
		h.Length = uint64(l)
	}
	if h.Masked {
		size += 4
	}
	if len(b) < size {
		return Header{}, nil
	}
	h.Size = size
	return h, nil
}

// AppendHeader appends the header of a final frame with opcode op and a
// payload of n bytes, masked with mask when mask is not nil (RFC 6455
// §5.2, §5.3: a client masks every frame).
func AppendHeader(b []byte, op byte, n uint64, mask *[4]byte) []byte {
	m := byte(0)
	if mask != nil {
		m = 0x80
	}
	b = append(b, 0x80|op)
	switch {
	case n < 126:
		b = append(b, m|byte(n))
	case n <= 0xffff:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	if mask != nil {
		b = append(b, mask[:]...)
	}
	return b
}

// AppendFrame appends a final frame with opcode op and payload p, masked
// with mask when mask is not nil.
func AppendFrame(b []byte, op byte, p []byte, mask *[4]byte) []byte {
	b = AppendHeader(b, op, uint64(len(p)), mask)
	for i, c := range p {
		if mask != nil {
			c ^= mask[i%4]
		}
		b = append(b, c)
	}
	return b
}

// Ping is an unmasked server ping with no payload (RFC 6455 §5.5.2).
// Callers must not modify it.
var Ping = []byte{0x80 | OpPing, 0}

// CloseFrame writes into b an unmasked server close frame with the
// status code and no reason (RFC 6455 §5.5.1) and returns it.
func CloseFrame(b *[4]byte, code int) []byte {
	*b = [4]byte{0x80 | OpClose, 2, byte(code >> 8), byte(code)}
	return b[:]
}

// MaskedCloseFrame writes into b a client close frame with the status
// code, masked with mask: a frame a proxy sends to a server must be
// masked (RFC 6455 §5.3).
func MaskedCloseFrame(b *[8]byte, code int, mask [4]byte) []byte {
	*b = [8]byte{0x80 | OpClose, 0x80 | 2, mask[0], mask[1], mask[2], mask[3], byte(code>>8) ^ mask[0], byte(code) ^ mask[1]}
	return b[:]
}

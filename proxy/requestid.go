package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// maxRequestIDLen bounds a client's X-Request-Id: longer ones are
// replaced, so a client cannot make every log line and backend header
// carry kilobytes of its choosing. 128 holds any UUID, ULID or trace id.
const maxRequestIDLen = 128

// requestID returns the request's id for the access log and the
// backends, and the client's own value when it was not taken. The peer's
// X-Request-Id is taken only from a trusted proxy (trusted: the peer is in
// the listener's TrustedProxies), and only when there is exactly one, 1 to
// maxRequestIDLen bytes of visible ASCII (no space: it must be one token in
// a log line); otherwise the id is new. A client that is no proxy must not
// choose the id every log line and backend trace carries (a collision with
// a real one, log confusion), so its valid value comes back as client, to
// be logged apart; an invalid one is dropped.
func requestID(h http.Header, trusted bool) (id, client string) {
	v := h["X-Request-Id"]
	ok := len(v) == 1 && validRequestID(v[0])
	if ok && trusted {
		return v[0], ""
	}
	if ok {
		client = v[0]
	}
	return newRequestID(), client
}

func validRequestID(s string) bool {
	if s == "" || len(s) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// newRequestID returns 16 random bytes in hex (32 digits). crypto/rand
// never fails on Linux since Go 1.24 (getrandom).
func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestID is the exchange's request id: reqID, or rid in hex once
// packed.
func (x *exchange) requestID() string {
	if x.ridPacked {
		return hex.EncodeToString(x.rid[:])
	}
	return x.reqID
}

// packRequestID keeps an id of 32 lower-case hex digits (edge's own, and
// any other that renders back the same) as its 16 bytes, for a
// connection held for long: the string is one more object for its
// lifetime, while its two uses left (the access line, a hand-off's
// record) can render it again.
func (x *exchange) packRequestID() {
	var b [16]byte
	if x.ridPacked || len(x.reqID) != 2*len(b) {
		return
	}
	if _, err := hex.Decode(b[:], []byte(x.reqID)); err != nil || hex.EncodeToString(b[:]) != x.reqID {
		return
	}
	x.rid, x.reqID, x.ridPacked = b, "", true
}

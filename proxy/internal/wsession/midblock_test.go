package wsession

import (
	"bytes"
	"compress/flate"
	"io"
	"os"
	"testing"

	"github.com/edgelb/edge/internal/wswire"
)

// A compressed message that stops inside a DEFLATE block leaves the
// backend's inflater (context takeover, RFC 7692 §7.2.2) in that block
// with that block's codes: the next message's bytes are decoded with
// them, not from a block header as edge counting it from a fresh state
// would. testdata/midblock-1.deflate is a dynamic block whose codes make
// every 0 bit pair a 258-byte match and that stops after two literals;
// midblock-2 is, counted from a block header, a stored block of zeros
// (one byte each), and, decoded in midblock-1's block, 1032 bytes per
// zero byte: 32 KiB on the wire, 33 MB at a zlib backend.
func midblockMessages(t *testing.T) (m1, m2 []byte) {
	t.Helper()
	m1, err := os.ReadFile("testdata/midblock-1.deflate")
	if err != nil {
		t.Fatal(err)
	}
	head, err := os.ReadFile("testdata/midblock-2-head.deflate")
	if err != nil {
		t.Fatal(err)
	}
	return m1, append(head, make([]byte, 32639)...)
}

func compressedFrame(payload []byte) []byte {
	k := [4]byte{9, 8, 7, 6}
	f := wswire.AppendFrame(nil, wswire.OpBinary, payload, &k)
	f[0] = 0x80 | 0x40 | wswire.OpBinary // FIN, RSV1
	return f
}

// inflateLikeABackend inflates the messages with one raw DEFLATE stream
// and the empty-block tail RFC 7692 §7.2.2 appends to each, as zlib-based
// backends do with context takeover, and returns the total size.
func inflateLikeABackend(t *testing.T, msgs ...[]byte) int64 {
	t.Helper()
	var in bytes.Buffer
	for _, m := range msgs {
		in.Write(m)
		in.Write([]byte{0, 0, 0xff, 0xff})
	}
	n, _ := io.Copy(io.Discard, flate.NewReader(&in))
	return n
}

func TestFromClientRefusesAMessageEndingInsideABlock(t *testing.T) {
	const limit = 4 << 20
	m1, m2 := midblockMessages(t)
	var s Session
	s.Init(limitConfig(limit), 1)
	s.DeflateOn()
	f1, f2 := compressedFrame(m1), compressedFrame(m2)
	c1 := s.FromClient(f1, 2)
	if c1.N != len(f1)-1 {
		t.Fatalf("a message that ends inside a DEFLATE block: %d of %d bytes went on, want all but its last", c1.N, len(f1))
	}
	c2 := s.FromClient(f2, 3)
	if c2.N > 0 {
		t.Fatalf("after a message that ends inside a DEFLATE block (%d of %d bytes forwarded), %d bytes of the next went on (reason %q)",
			c1.N, len(f1), c2.N, s.Reason())
	}
	if s.Reason() != ReasonDeflateError {
		t.Fatalf("reason %q, want %q", s.Reason(), ReasonDeflateError)
	}
}

// TestMidblockMessagesAreABomb keeps the fixture honest: what the test
// above refuses does inflate past the limit at a backend.
func TestMidblockMessagesAreABomb(t *testing.T) {
	m1, m2 := midblockMessages(t)
	if n := inflateLikeABackend(t, m1, m2); n < 8<<20 {
		t.Fatalf("midblock-1 and -2 inflate to %d bytes, want a bomb", n)
	}
}

func TestFromClientKeepsFlushedMessagesWithContextTakeover(t *testing.T) {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	var s Session
	s.Init(limitConfig(1<<20), 1)
	s.DeflateOn()
	for i := range 5 {
		msg := bytes.Repeat([]byte{byte('a' + i), 'x', 'y'}, 1000+i)
		c := deflateMessage(t, w, &buf, msg) // one writer: context takeover
		f := compressedFrame(c)
		if got := s.FromClient(f, int64(i+2)); got.N != len(f) {
			t.Fatalf("message %d: %d of %d bytes forwarded, reason %q", i, got.N, len(f), s.Reason())
		}
	}
}

// TestFromClientCountsTheTailBeforeTheLastByte: the tail a receiver
// appends (RFC 7692 §7.2.2) inflates too, and inside midblock-1's block
// it is 258-byte matches. With the limit at what the message counts
// without it, the tail takes it over: the last byte stays back, so no
// backend ever inflates the whole message, and the client gets 1009.
func TestFromClientCountsTheTailBeforeTheLastByte(t *testing.T) {
	m1, _ := midblockMessages(t)
	var z inflater
	z.reset()
	z.feed(m1, [4]byte{}, 0, 1<<30)
	limit := z.out
	if backend := inflateLikeABackend(t, m1); uint64(backend) <= limit {
		t.Fatalf("the fixture inflates to %d at a backend, no more than the %d counted without the tail", backend, limit)
	}
	var s Session
	s.Init(limitConfig(int64(limit)), 1)
	s.DeflateOn()
	f1 := compressedFrame(m1)
	c := s.FromClient(f1, 2)
	if c.N != len(f1)-1 || s.Reason() != ReasonMessageTooBigInflated || s.closeCode.Load() != CloseMessageTooBig {
		t.Fatalf("%d of %d bytes went on, reason %q, close %d; want all but the last, 1009", c.N, len(f1), s.Reason(), s.closeCode.Load())
	}
	// The same message as a final empty frame after it: the empty frame,
	// which would complete the message, stays back whole.
	var e Session
	e.Init(limitConfig(int64(limit)), 1)
	e.DeflateOn()
	first := compressedFrame(m1)
	first[0] &^= 0x80 // not final
	last := []byte{0x80, 0x80, 1, 2, 3, 4}
	if c := e.FromClient(append(first, last...), 2); c.N != len(first) || e.Reason() != ReasonMessageTooBigInflated {
		t.Fatalf("with an empty final frame: %d of %d went on, reason %q", c.N, len(first)+len(last), e.Reason())
	}
}

package wsession

import (
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
)

func msg(n int) []byte { return testkit.MaskedFrame(wswire.OpText, make([]byte, n)) }

func TestRateClosesAClientOverItsMessageRate(t *testing.T) {
	var s Session
	s.Init(&Config{Rate: Rate{Messages: 10, MessageBurst: 5}}, 0)
	for i := range 5 {
		if c := s.FromClient(msg(3), 0); c.N != len(msg(3)) || s.Requested() {
			t.Fatalf("message %d of a burst of 5: forwarded %d, close requested %v", i+1, c.N, s.Requested())
		}
	}
	c := s.FromClient(msg(3), 0)
	if c.N != 0 || !c.CloseBackend || !c.Wake || s.Reason() != ReasonRateLimited || s.closeCode.Load() != ClosePolicy {
		t.Fatalf("6th message at once: %+v reason %q code %d; want nothing forwarded, close 1008 rate_limited", c, s.Reason(), s.closeCode.Load())
	}
	ctl := s.BackendControl()
	if string(ctl.Frame) != string(rateLimitedClose) || !ctl.End {
		t.Fatalf("close frame % x, want % x ending the connection", ctl.Frame, rateLimitedClose)
	}
	// The bucket refills at the rate: one message 100 ms later passes.
	var r Session
	r.Init(&Config{Rate: Rate{Messages: 10, MessageBurst: 5}}, 0)
	for range 5 {
		r.FromClient(msg(3), 0)
	}
	if c := r.FromClient(msg(3), int64(100*time.Millisecond)); c.N == 0 || r.Requested() {
		t.Fatal("a message after one token refilled was refused")
	}
}

func TestRateSlowPausesReading(t *testing.T) {
	var s Session
	s.Init(&Config{Rate: Rate{Bytes: 1000, ByteBurst: 1000, Slow: true}}, 0)
	p := msg(1500 - 8)
	if len(p) != 1500 {
		t.Fatalf("frame of %d bytes", len(p))
	}
	c := s.FromClient(p, 0)
	if c.N != len(p) || s.Requested() {
		t.Fatalf("slow: forwarded %d of %d, close requested %v", c.N, len(p), s.Requested())
	}
	want := int64(500 * time.Millisecond) // 1.5 s of bytes, 1 s of burst
	if c.Pause != want || s.ReadableAt() != want {
		t.Fatalf("pause until %d (ReadableAt %d), want %d", c.Pause, s.ReadableAt(), want)
	}
	if c := s.FromClient(msg(10), want); c.Pause == 0 {
		t.Fatal("bytes right at the end of the pause did not pause again")
	}
}

// A rate needs frames followed (messages are counted at their first
// frame); the buckets are 16 bytes.
func TestRateStateIsSmall(t *testing.T) {
	if n := unsafeSizeof(buckets{}); n != 16 {
		t.Fatalf("rate state %d bytes, want 16", n)
	}
	c := &Config{Rate: Rate{Bytes: 1}}
	if !c.FrameAware() || !c.tracksClient() {
		t.Fatal("a rate without frame tracking")
	}
}

// Control frames are no part of a message (RFC 6455 §5.5) but each one
// costs the backend a frame and a ping a pong: a client that sends only
// pings must not escape the message rate.
func TestRateCountsControlFrames(t *testing.T) {
	var s Session
	s.Init(&Config{Rate: Rate{Messages: 10, MessageBurst: 5}}, 0)
	ping := testkit.MaskedFrame(wswire.OpPing, []byte("x"))
	for i := range 50 {
		if c := s.FromClient(ping, 0); c.N == 0 {
			if s.Reason() != ReasonRateLimited || i != 5 {
				t.Fatalf("ping %d refused with %q, want the 6th refused as rate_limited", i+1, s.Reason())
			}
			return
		}
	}
	t.Fatal("50 pings at once passed a rate of 10 messages a second with a burst of 5")
}

// TestRateCrossingWhateverTheBatching: a burst of 200 and 1,500 messages
// sent at once: the first 200 go on and nothing after them, whether the
// messages come in one read or one at a time.
func TestRateCrossingWhateverTheBatching(t *testing.T) {
	one := msg(3)
	var all []byte
	for range 1500 {
		all = append(all, one...)
	}
	for _, read := range []int{len(all), len(one), 1000, 7} {
		var s Session
		s.Init(&Config{Rate: Rate{Messages: 100, MessageBurst: 200}}, 0)
		sent := 0
		for off := 0; off < len(all) && !s.Requested(); {
			c := s.FromClient(all[off:min(len(all), off+read)], 0)
			sent += c.N
			off += c.N
			if c.N == 0 && !s.Requested() {
				t.Fatalf("read of %d: stuck at %d", read, off)
			}
		}
		if sent != 200*len(one) || s.Reason() != ReasonRateLimited {
			t.Fatalf("reads of %d bytes: %d messages went on (%d bytes), reason %q; want 200", read, sent/len(one), sent, s.Reason())
		}
	}
}

// TestRateCountsEveryFrame: fragments, empty continuations and control
// frames each cost one; a message of 20 one-byte fragments under a rate
// of 5 stops after the fifth frame.
func TestRateCountsEveryFrame(t *testing.T) {
	var stream []byte
	stream = append(stream, testkit.MaskedFrame(wswire.OpText, []byte("a"))...)
	stream[0] &^= 0x80 // not final
	for range 19 {
		f := testkit.MaskedFrame(wswire.OpContinuation, nil)
		f[0] &^= 0x80
		stream = append(stream, f...)
	}
	var s Session
	s.Init(&Config{Rate: Rate{Messages: 5}}, 0)
	c := s.FromClient(stream, 0)
	first := len(testkit.MaskedFrame(wswire.OpText, []byte("a")))
	if want := first + 4*len(testkit.MaskedFrame(wswire.OpContinuation, nil)); c.N != want || s.Reason() != ReasonRateLimited {
		t.Fatalf("%d bytes went on, reason %q; want %d (five frames) and rate_limited", c.N, s.Reason(), want)
	}
}

// TestByteRateCrossing: a byte rate lets through exactly its burst, at
// any batching, then closes.
func TestByteRateCrossing(t *testing.T) {
	p := msg(1000 - 8)
	var s Session
	s.Init(&Config{Rate: Rate{Bytes: 1500, ByteBurst: 1500}}, 0)
	c1 := s.FromClient(p, 0)
	c2 := s.FromClient(p, 0)
	if c1.N != 1000 || c2.N != 500 || c2.CloseBackend || s.Reason() != ReasonRateLimited {
		t.Fatalf("went on %d then %d (close to backend %v), reason %q; want 1000, 500 and the close", c1.N, c2.N, c2.CloseBackend, s.Reason())
	}
}

package wsession

import (
	"math"
	"sync/atomic"

	"github.com/edgelb/edge/internal/wswire"
)

// Rate is a per-connection limit on what the client sends: messages per
// second and bytes per second, each a token bucket, with the action taken
// when one is empty.
type Rate struct {
	// Messages is frames per second, every frame counted: a message in
	// one frame is one, a fragment, a continuation (empty or not) and a
	// control frame are one each (RFC 6455 §5.4, §5.5), so a message cut
	// into 20,000 fragments costs 20,000. 0: none.
	Messages     float64
	MessageBurst float64 // bucket size in frames; <= 0: one second's worth (at least 1)
	Bytes        float64 // bytes per second, every byte read from the client; 0: none
	ByteBurst    float64 // bucket size in bytes; <= 0: one second's worth
	// Slow stops reading the client until the bucket refills (pushing
	// back through TCP) instead of closing it with 1008.
	Slow bool
}

// On reports whether r limits anything.
func (r *Rate) On() bool { return r.Messages > 0 || r.Bytes > 0 }

// buckets are the two token buckets of a connection as GCRA theoretical
// arrival times (unix nanos when the bucket is full again, ITU-T I.371):
// 16 bytes, nothing allocated per message. Atomics: the client reader
// charges them, the readiness splice's sweeper reads when a paused
// reader may resume.
type buckets struct {
	msgs, bytes atomic.Int64
}

// charge takes cost units from a bucket of rate per second and burst
// units at now. It reports whether the bucket held them (always charged
// when slow) and the moment the bucket has room again.
func charge(tat *atomic.Int64, now int64, cost, rate, burst float64, slow bool) (ok bool, resume int64) {
	if rate <= 0 || cost == 0 {
		return true, 0
	}
	if burst <= 0 {
		burst = max(rate, 1)
	}
	per := 1e9 / rate
	tau := int64(math.Min(burst*per, math.MaxInt64/4))
	t := max(tat.Load(), now)
	nt := t + int64(math.Min(cost*per, math.MaxInt64/4))
	if nt-now > tau && !slow {
		return false, 0
	}
	tat.Store(nt)
	return true, nt - tau
}

// rateLimitedClose is the close frame a client over its rate gets: 1008
// (policy violation, RFC 6455 §7.4.1) with the reason "rate limited".
// Callers must not modify it.
var rateLimitedClose = append([]byte{0x80 | wswire.OpClose, 2 + byte(len(rateReason)), ClosePolicy >> 8, ClosePolicy & 0xff}, rateReason...)

const rateReason = "rate limited"

// budget bounds what FromClient may let through at now when the rate
// closes (not Rate.Slow): the frames the message bucket holds (k.budget)
// and the bytes the byte bucket holds (p cut to them, cut). Whatever the
// reads' batching, everything up to the crossing goes on and nothing
// after it: the frame that finds the bucket empty stays back whole, and
// a byte budget ends where it ends. Under Rate.Slow nothing is bounded:
// everything read goes on and the reads pause (charge).
func (s *Session) budget(p []byte, k *counting, now int64) (q []byte, cut bool) {
	r, f := &s.cfg.Rate, s.fw
	if !r.On() || r.Slow {
		return p, false
	}
	if r.Messages > 0 {
		k.budget = int(min(room(&f.rate.msgs, now, r.Messages, r.MessageBurst), int64(len(p))))
	}
	if r.Bytes > 0 {
		if b := room(&f.rate.bytes, now, r.Bytes, r.ByteBurst); b < int64(len(p)) {
			return p[:b], true
		}
	}
	return p, false
}

// room is how many whole units a bucket of rate per second and burst
// units holds at now.
func room(tat *atomic.Int64, now int64, rate, burst float64) int64 {
	if burst <= 0 {
		burst = max(rate, 1)
	}
	per := 1e9 / rate
	tau := math.Min(burst*per, math.MaxInt64/4)
	r := (tau - float64(max(tat.Load(), now)-now)) / per
	if r < 0 {
		return 0
	}
	return int64(math.Min(math.Floor(r+1e-9), math.MaxInt32))
}

// charge takes the frames and n bytes the client sent at now from its
// buckets (within what budget allowed, or under Rate.Slow whatever they
// were) and says when to read again.
func (s *Session) charge(n, frames int, now int64) Client {
	r, f := &s.cfg.Rate, s.fw
	_, resumeM := charge(&f.rate.msgs, now, float64(max(frames, 0)), r.Messages, r.MessageBurst, true)
	_, resumeB := charge(&f.rate.bytes, now, float64(n), r.Bytes, r.ByteBurst, true)
	c := Client{N: n}
	if at := max(resumeM, resumeB); r.Slow && at > now {
		c.Pause = at
	}
	return c
}

// rateClose charges the frames and n bytes that go on before the
// crossing and ends the client's half: a close 1008 to the client, and
// a masked close 1001 to the backend when its stream is between two
// frames (boundary).
func (s *Session) rateClose(n, frames int, boundary bool, now int64) Client {
	s.charge(n, frames, now)
	f := s.fw
	f.tooBig = true
	f.endAfterClose.Store(true)
	return Client{N: n, CloseBackend: boundary, Wake: s.Request(ClosePolicy, ReasonRateLimited)}
}

// ReadableAt is when a client paused for its rate may be read again, in
// unix nanos; 0 or a past time: now.
func (s *Session) ReadableAt() int64 {
	f, r := s.fw, &s.cfg.Rate
	if f == nil || !r.Slow {
		return 0
	}
	return max(resume(&f.rate.msgs, r.Messages, r.MessageBurst), resume(&f.rate.bytes, r.Bytes, r.ByteBurst))
}

func resume(tat *atomic.Int64, rate, burst float64) int64 {
	if rate <= 0 {
		return 0
	}
	if burst <= 0 {
		burst = max(rate, 1)
	}
	return tat.Load() - int64(math.Min(burst*1e9/rate, math.MaxInt64/4))
}

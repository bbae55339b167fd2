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
	Messages     float64 // messages per second (a data frame that starts a message); 0: none
	MessageBurst float64 // bucket size in messages; <= 0: one second's worth (at least 1)
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

// charge takes the starts messages and len(p) bytes the client sent at
// now from its buckets. Over a bucket, the client gets a close 1008 and
// nothing of p goes on (the backend gets a masked close 1001 when its
// stream was between two frames, boundary); under Rate.Slow p goes on
// and Pause says when to read again.
func (s *Session) charge(p []byte, starts int, boundary bool, now int64) Client {
	r, f := &s.cfg.Rate, s.fw
	okM, resumeM := charge(&f.rate.msgs, now, float64(starts), r.Messages, r.MessageBurst, r.Slow)
	okB, resumeB := charge(&f.rate.bytes, now, float64(len(p)), r.Bytes, r.ByteBurst, r.Slow)
	if okM && okB {
		c := Client{N: len(p)}
		if at := max(resumeM, resumeB); at > now {
			c.Pause = at
		}
		return c
	}
	f.tooBig = true
	f.endAfterClose.Store(true)
	return Client{CloseBackend: boundary, Wake: s.Request(ClosePolicy, ReasonRateLimited)}
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

package balance

import (
	"math"
	"sync"
	"time"
)

// Bucket is one token bucket for a whole pool: new connections per second
// from all clients together. Per-client limits (Limiter) do not help when a
// backend restart makes thousands of different clients reconnect in the
// same second (mattermost-webapp#10960, mender-server#2162); this caps what
// reaches the backends, and whoever is refused is told to come back later.
// A nil *Bucket admits everything. Methods are safe for concurrent use.
type Bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   int64 // unix nanoseconds of the last refill
	now    func() time.Time
}

// NewBucket returns a bucket of rate tokens per second holding at most
// burst (0 means the rate rounded up, at least 1), full at start; nil when
// rate is not a positive finite number. now defaults to time.Now.
func NewBucket(rate float64, burst int, now func() time.Time) *Bucket {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	b := &Bucket{rate: rate, burst: float64(burst), now: now}
	if burst <= 0 {
		b.burst = max(1, math.Ceil(rate))
	}
	b.tokens, b.last = b.burst, now().UnixNano()
	return b
}

// Take takes one token. When none is left it reports false and how long
// until the next one, rounded up to whole seconds and at least 1s.
func (b *Bucket) Take() (ok bool, retryAfter time.Duration) {
	if b == nil {
		return true, 0
	}
	now := b.now().UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := now - b.last; d > 0 {
		b.tokens = min(b.burst, b.tokens+float64(d)/float64(time.Second)*b.rate)
		b.last = now
	}
	if b.tokens < 1 {
		wait := math.Ceil((1 - b.tokens) / b.rate)
		return false, time.Duration(max(wait, 1)) * time.Second
	}
	b.tokens--
	return true, 0
}

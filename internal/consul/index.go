package consul

import (
	"context"
	"math/rand/v2"
	"time"
)

// NextIndex applies the rules of Consul's "Blocking Queries" documentation to
// the X-Consul-Index of an answer. prev is the WaitIndex that was sent, got the
// index that came back. It returns the WaitIndex for the next query and
// whether the answer carries news.
//
//   - got == prev: the wait timed out, nothing changed.
//   - got < prev: the index went backwards (a server lost its state, or a
//     stale read from another server): reset to 0 so the next query returns at
//     once with the current index, and take the answer as news.
//   - got == 0: never valid after a successful query; use 1 so the next query
//     blocks instead of returning at once in a tight loop.
func NextIndex(prev, got uint64) (next uint64, changed bool) {
	switch {
	case got == 0:
		return 1, true
	case got < prev:
		return 0, true
	case got == prev:
		return prev, false
	default:
		return got, true
	}
}

// Backoff is exponential with jitter, bounded by [min, max]. The zero value
// is not usable; see NewBackoff.
type Backoff struct {
	min, max time.Duration
	cur      time.Duration
}

// NewBackoff returns a backoff from lo (100 ms when 0) to hi (at least lo).
func NewBackoff(lo, hi time.Duration) Backoff {
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi < lo {
		hi = lo
	}
	return Backoff{min: lo, max: hi}
}

// Next returns the wait before the next attempt: the doubled step with
// "equal jitter" (half fixed, half random), so many edges that lost the same
// Consul agent do not come back in lockstep.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	return max(half+rand.N(half+1), b.min)
}

// Reset starts the steps again from the least wait, after a success.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d or until ctx ends; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Watch runs a follower's blocking queries until ctx ends: read asks
// from index (0 the first time, and after an error, since the agent may
// have restarted) and returns the index to block on next; an error is
// handed to fail, then retried after the backoff between lo and hi,
// while what was read before stays in force.
func Watch(ctx context.Context, lo, hi time.Duration, read func(ctx context.Context, index uint64) (uint64, error), fail func(error)) {
	bo := NewBackoff(lo, hi)
	var index uint64
	for ctx.Err() == nil {
		next, err := read(ctx, index)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fail(err)
			index = 0
			if !Sleep(ctx, bo.Next()) {
				return
			}
			continue
		}
		index = next
		bo.Reset()
	}
}

package discovery

import (
	"math/rand/v2"
	"time"

	"github.com/edgelb/edge/balance"
)

// nextIndex applies the rules of Consul's "Blocking Queries" documentation to
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
func nextIndex(prev, got uint64) (next uint64, changed bool) {
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

// backoff is exponential with jitter, bounded by [min, max]. The zero value
// is not usable; see newBackoff.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func newBackoff(lo, hi time.Duration) backoff {
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi < lo {
		hi = lo
	}
	return backoff{min: lo, max: hi}
}

// next returns the wait before the next attempt: the doubled step with
// "equal jitter" (half fixed, half random), so many edges that lost the same
// Consul agent do not come back in lockstep.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	return max(half+rand.N(half+1), b.min)
}

func (b *backoff) reset() { b.cur = 0 }

// panicDecision is the result of applying the panic threshold.
type panicDecision struct {
	publish []balance.Member // what the pool gets
	panic   bool             // the answer was held back
}

// applyPanic decides what to publish for a successful answer. base is the
// last set accepted without panic (what the pool held before the drop),
// answer the translated answer, threshold the minimum fraction of len(base)
// that an answer must keep (<= 0 disables), holding whether the panic hold
// time has run out (true means "still hold").
//
// The rule: when base is non-empty and the answer has fewer than
// threshold*len(base) members, publish base united with the answer (members
// of the answer win on address and weight), and report panic. A registry that
// flaps, a Consul server that restarted with an empty catalog, or a network
// partition between Consul and the checks then cannot empty a pool in one
// step; a genuine large scale-down takes effect once the hold time passes.
func applyPanic(base, answer []balance.Member, threshold float64, holding bool) panicDecision {
	if threshold <= 0 || len(base) == 0 || !holding ||
		float64(len(answer)) >= threshold*float64(len(base)) {
		return panicDecision{publish: answer}
	}
	byID := make(map[string]balance.Member, len(base)+len(answer))
	for _, m := range base {
		byID[m.ID] = m
	}
	for _, m := range answer {
		byID[m.ID] = m
	}
	out := make([]balance.Member, 0, len(byID))
	for _, m := range byID {
		out = append(out, m)
	}
	sortMembers(out)
	return panicDecision{publish: out, panic: true}
}

package balance

import (
	"math"
	"sync/atomic"
)

// Fleet-scope limits: a pool's MaxConnsPerBackend or connection rate can
// be the fleet's, not each edge process's. Every edge then enforces a share
// of it between two publications of the fleet's load (fleet.Load),
// computed by the pure functions below from the load every edge last
// published; fleet.Shares applies the result with
// Backend.SetConnShare and Bucket.SetRate.
//
// The share of a per-backend limit L on edge e is
//
//	share(e) = pub(e) + floor(w(e) × (L − Σ pub))
//
// where pub are the counts every edge last published for the backend and
// w the edge weights (EdgeWeights), which sum to 1. Every edge computes
// from the same published numbers, so the shares add up to at most L
// whatever each edge does between two publications: an edge takes at most
// its share, and the others count it at what it published. The fleet can
// only go over L while edges read different versions of the fleet (the
// milliseconds a publication takes to reach every blocking query), by at
// most the room (L − Σ pub) the newer publications took, times the share
// of it the other edges had; and with weights from each edge's observed
// rate the room is handed out where the new connections arrive.

// fleetShareFloor is the part of a fleet-wide limit split evenly among
// the edges whatever their rates; the rest is split by rate. It keeps an
// edge that had no new connections lately able to take some as soon as
// they come (an L4 balancer moving traffic), at the cost of handing out
// the room more slowly to the busy edges: each publication still gives
// them their part of what is left, so the room fills geometrically.
const fleetShareFloor = 0.5

// EdgeWeights returns each edge's weight in the fleet from its recent rate
// of new connections: half of the whole split evenly (fleetShareFloor),
// half by rate, or all evenly when no edge had any. The weights sum to 1
// and each is at least 1/(2n). Negative and NaN rates count as 0.
func EdgeWeights(rates []float64) []float64 {
	n := len(rates)
	out := make([]float64, n)
	if n == 0 {
		return out
	}
	var sum float64
	for _, r := range rates {
		if r > 0 && !math.IsInf(r, 1) {
			sum += r
		}
	}
	for i, r := range rates {
		if sum <= 0 {
			out[i] = 1 / float64(n)
			continue
		}
		if !(r > 0) || math.IsInf(r, 1) {
			r = 0
		}
		out[i] = fleetShareFloor/float64(n) + (1-fleetShareFloor)*r/sum
	}
	return out
}

// ConnShare returns an edge's share of a fleet-wide per-backend limit:
// what it last published plus its weight's part of the room the published
// counts leave (a negative room, the fleet over the limit, shrinks it),
// never below 0. published is every edge's last published count of the
// backend, this edge's included as self.
func ConnShare(limit int64, published []int64, self int, weight float64) int64 {
	var total int64
	for _, n := range published {
		total += max(n, 0)
	}
	room := float64(limit - total)
	own := int64(0)
	if self >= 0 && self < len(published) {
		own = max(published[self], 0)
	}
	return max(own+int64(math.Floor(weight*room)), 0)
}

// ClaimCap bounds an edge's share by what the other edges hold or have
// claimed (claims[o], each the larger of an edge's count and its published
// claim): the limit minus their sum, never below 0. An edge raises what it
// enforces only to a claim it published, so the edges that read it leave
// that room alone; with ConnShare the fleet goes over the limit only while
// two edges raise their claims within one propagation delay of each other.
func ClaimCap(limit int64, claims []int64, self int) int64 {
	var others int64
	for i, n := range claims {
		if i != self {
			others += max(n, 0)
		}
	}
	return max(limit-others, 0)
}

// FallbackConnShare is an edge's share of a fleet-wide per-backend limit
// when the fleet's numbers are stale or Consul is unreachable: the limit
// divided by the last known fleet size, at least 1 so a small limit over a
// large fleet still serves.
func FallbackConnShare(limit int64, size int) int64 {
	return max(limit/int64(max(size, 1)), 1)
}

// SetConnShare sets b's limit on this edge to n connections, in place of
// the pool's MaxConnsPerBackend, when that limit is the fleet's: n is this
// edge's share of it (ConnShare, FallbackConnShare). 0 admits nothing new;
// connections already held stay. A negative n restores the pool's limit.
func (b *Backend) SetConnShare(n int64) {
	if n < 0 {
		b.connShare.Store(0)
		return
	}
	b.connShare.Store(n + 1)
}

// ConnLimit returns b's connection limit on this edge (0: none, unless
// shared) and whether it is a share set by SetConnShare.
func (b *Backend) ConnLimit() (limit int64, shared bool) {
	if s := b.connShare.Load(); s > 0 {
		return s - 1, true
	}
	if b.cfg == nil {
		return 0, false
	}
	return b.cfg.maxConns, false
}

// Opened returns how many connections the pool's backends counted since
// it was built (Acquire and successful TryAcquire): its recent rate of new
// connections is the difference of two readings.
func (p *Pool) Opened() int64 { return p.cfg.opened.Load() }

// fleetCounters are a pool's counters fleet sharing reads.
type fleetCounters struct {
	opened atomic.Int64
}

// RateShare returns an edge's share of a fleet-wide rate: the rate times
// its weight (EdgeWeights), at least floor so an edge is never shut out
// between two publications.
func RateShare(rate, weight, floor float64) float64 {
	return max(rate*weight, floor)
}

// SetRate changes the bucket's rate and burst (burst 0: the rate rounded
// up, at least 1), keeping the tokens it holds up to the new burst: the
// edge's share of a fleet-wide rate moves at every publication without
// refilling anyone's bucket. It does nothing on a nil bucket, or for a
// rate that is not a positive finite number.
func (b *Bucket) SetRate(rate float64, burst int) {
	if b == nil || !(rate > 0) || math.IsInf(rate, 1) {
		return
	}
	now := b.now().UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := now - b.last; d > 0 {
		b.tokens = min(b.burst, b.tokens+float64(d)/float64(1e9)*b.rate)
		b.last = now
	}
	b.rate, b.burst = rate, float64(burst)
	if burst <= 0 {
		b.burst = max(1, math.Ceil(rate))
	}
	b.tokens = min(b.tokens, b.burst)
}

// Rate returns the bucket's rate and burst; 0 and 0 for a nil bucket.
func (b *Bucket) Rate() (rate, burst float64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate, b.burst
}

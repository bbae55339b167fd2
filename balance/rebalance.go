package balance

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Rebalancing live connections across a pool's backends: when the fleet's
// connections on some backends stay above those backends' fair share (by
// effective weight, after slow start) by more than a tolerance for a
// settling time, every edge closes some of its connections on them, so
// that their clients reconnect and the normal pick places them on the
// backends under their share. A Rebalancer is the pure policy of one pool
// on one edge: it is told the fleet's load once a tick and answers how
// many connections this edge closes on each backend during that tick.
//
// Why each rule:
//   - A tolerance band with hysteresis: an episode starts above
//     1+Tolerance times the fair share and ends at 1+Tolerance/2, so the
//     noise of reconnects does not start and stop episodes.
//   - A settling time: a backend that just joined is under its share by
//     nature, and slow start fills it with new connections first.
//   - A budget for the whole fleet, divided among the edges by what each
//     holds on each backend: each edge moves its part, and together they
//     move at most the budget (the connections rate is what the clients'
//     reconnects cost: full or resumed TLS handshakes).
//   - Only connections older than the episode are moved (the caller picks
//     them): a moved client reconnects as a new connection, so none is
//     moved twice in one episode.

// RebalanceOptions are one pool's rebalancing settings.
type RebalanceOptions struct {
	// Tolerance is how far above its fair share a backend may be before an
	// episode starts, as a fraction (0.10: 10 %). Default 0.10.
	Tolerance float64
	// Settle is how long the imbalance must last before an episode starts.
	// Default 30s.
	Settle time.Duration
	// Rate is the fleet's budget of moved connections per second. Default
	// 10.
	Rate float64
}

// withDefaults fills the zero fields.
func (o RebalanceOptions) withDefaults() RebalanceOptions {
	if o.Tolerance <= 0 {
		o.Tolerance = 0.10
	}
	if o.Settle <= 0 {
		o.Settle = 30 * time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 10
	}
	return o
}

// BackendLoad is one backend as a Rebalancer sees it.
type BackendLoad struct {
	ID string
	// Weight is its effective weight now (declared or overridden, times
	// its slow-start share); 0 for a backend that takes no connections
	// (unavailable, drained, disabled): it has no fair share and nothing
	// is moved off it by rebalancing (a drain moves its connections).
	Weight float64
	// Shed marks a backend that serves with a Weight of 0 on purpose (a
	// canary's other side at Share 1, or the version's at 0): its fair
	// share is nothing, and every connection on it is moved.
	Shed bool
	// Fleet is its live connections over the whole fleet; Local those of
	// this edge.
	Fleet, Local int64
	// Part is this edge's part of the backend's connections as every edge
	// reads it (its own published count over the fleet's, from one
	// snapshot), so that the edges' parts sum to one and together they
	// move the budget; 0 takes Local/Fleet (an edge alone).
	Part float64
}

// Plan is what a Rebalancer decided for one tick.
type Plan struct {
	// Active: an episode is under way; Since is when it started.
	Active bool
	Since  time.Time
	// Imbalance is the largest ratio of a backend's fleet connections to
	// its fair share (1: balanced; 0: nothing to compare).
	Imbalance float64
	// Shedding is the fleet's connections on Shed backends, all of which
	// are to move.
	Shedding int64
	// Moves is how many of this edge's connections to close on each
	// backend during this tick, by ID; nil when none.
	Moves map[string]int
	// Window is the time since the last tick, over which the moves are
	// to be spread, so that a late tick (a busy machine) does not move
	// its longer budget in a burst.
	Window time.Duration
	// Over lists the backends whose connections are being moved over the
	// fleet, by ID (Backend.SetShedding), whether or not this edge moves
	// any of them this tick.
	Over []string
}

// Rebalancer is one pool's rebalancing policy on one edge. It is not safe
// for concurrent use: one owner ticks it.
type Rebalancer struct {
	opts RebalanceOptions
	// overSince is when the imbalance went above the start band (zero: it
	// is not); since is when the episode started (zero: none).
	overSince, since time.Time
	last             time.Time
	// carry keeps the fraction of a move from tick to tick, so that a
	// budget under one connection a tick still moves some.
	carry float64
}

// NewRebalancer returns the policy for o.
func NewRebalancer(o RebalanceOptions) *Rebalancer {
	return &Rebalancer{opts: o.withDefaults()}
}

// Stop ends any episode (a drain, an upgrade, stale fleet numbers, an
// operator's pause): the next imbalance must settle again.
func (r *Rebalancer) Stop() {
	r.overSince, r.since, r.last = time.Time{}, time.Time{}, time.Time{}
	r.carry = 0
}

// Tick decides at now, from the fleet's load of the pool's backends.
func (r *Rebalancer) Tick(now time.Time, bs []BackendLoad) Plan {
	fair, imbalance, shedding := fairShares(bs)
	startBand, stopBand := 1+r.opts.Tolerance, 1+r.opts.Tolerance/2
	dt := now.Sub(r.last)
	r.last = now
	calm := Plan{Imbalance: imbalance, Shedding: shedding}
	switch {
	case r.since.IsZero() && (imbalance > startBand || shedding > 0):
		if r.overSince.IsZero() {
			r.overSince = now
		}
		if now.Sub(r.overSince) < r.opts.Settle {
			return calm
		}
		r.since, dt = now, 0
	case r.since.IsZero():
		r.overSince = time.Time{}
		return calm
	case imbalance <= stopBand && shedding == 0:
		r.Stop()
		return calm
	}
	p := Plan{Active: true, Since: r.since, Imbalance: imbalance, Shedding: shedding}
	for i, b := range bs {
		if (b.Weight > 0 || b.Shed) && float64(b.Fleet) > fair[i]*stopBand {
			p.Over = append(p.Over, b.ID)
		}
	}
	if dt <= 0 || dt > 10*time.Second {
		// The first tick of an episode, or after a gap: no budget spent
		// for time that was not watched.
		return p
	}
	p.Moves, p.Window = r.moves(bs, fair, stopBand, r.opts.Rate*dt.Seconds()), dt
	return p
}

// fairShares is each backend's fair share of the fleet's connections
// (by weight), the largest ratio of connections to it among the backends
// with a weight, and the connections on Shed backends.
func fairShares(bs []BackendLoad) (fair []float64, imbalance float64, shedding int64) {
	var total int64
	var weights float64
	for _, b := range bs {
		switch {
		case b.Weight > 0:
			total += b.Fleet
			weights += b.Weight
		case b.Shed:
			total += b.Fleet
			shedding += b.Fleet
		}
	}
	fair = make([]float64, len(bs))
	if total == 0 || weights == 0 {
		return fair, 0, 0
	}
	for i, b := range bs {
		if b.Weight <= 0 {
			continue
		}
		fair[i] = float64(total) * b.Weight / weights
		if fair[i] > 0 {
			imbalance = math.Max(imbalance, float64(b.Fleet)/fair[i])
		}
	}
	return fair, imbalance, shedding
}

// moves divides budget (the fleet's moves this tick) among the backends
// above band times their fair share, by their excess, and takes this
// edge's part of each: its part of the backend's connections. No backend
// is taken below the band, nor more than this edge holds there.
//
// The fraction of a move left over is carried to the next tick for the
// edge as a whole, and the whole moves of a tick go to the backends by
// largest remainder: a fraction carried per backend would make every
// backend's move fall due on the same ticks, and the edge move in bursts
// (nothing, then one on every backend at once) instead of at its rate.
func (r *Rebalancer) moves(bs []BackendLoad, fair []float64, band, budget float64) map[string]int {
	excess := make([]float64, len(bs))
	var sum float64
	for i, b := range bs {
		if (b.Weight > 0 || b.Shed) && float64(b.Fleet) > fair[i]*band {
			excess[i] = float64(b.Fleet) - fair[i]*band
			sum += excess[i]
		}
	}
	if sum == 0 {
		r.carry = 0
		return nil
	}
	mine := make([]float64, len(bs))
	var total float64
	for i, b := range bs {
		if excess[i] == 0 || b.Local <= 0 || b.Fleet <= 0 {
			continue
		}
		fleetMoves := math.Min(budget*excess[i]/sum, excess[i])
		part := b.Part
		if part <= 0 {
			part = float64(b.Local) / float64(b.Fleet)
		}
		mine[i] = math.Min(fleetMoves*math.Min(part, 1), float64(b.Local))
		total += mine[i]
	}
	if total == 0 {
		return nil
	}
	// The epsilon: a third of a move three times is one move.
	whole := int(total + r.carry + 1e-9)
	r.carry = total + r.carry - float64(whole)
	return allot(bs, mine, total, whole)
}

// allot divides whole moves among the backends in proportion to mine
// (which sums to total), by largest remainder, none above what this edge
// holds there.
func allot(bs []BackendLoad, mine []float64, total float64, whole int) map[string]int {
	if whole <= 0 {
		return nil
	}
	type share struct {
		i    int
		n    int
		frac float64
	}
	shares := make([]share, 0, len(bs))
	given := 0
	for i := range bs {
		if mine[i] <= 0 {
			continue
		}
		x := mine[i] * float64(whole) / total
		n := int(x)
		shares = append(shares, share{i: i, n: n, frac: x - float64(n)})
		given += n
	}
	slices.SortStableFunc(shares, func(a, b share) int { return cmp.Compare(b.frac, a.frac) })
	for k := 0; given < whole && k < len(shares); k++ {
		shares[k].n++
		given++
	}
	out := map[string]int{}
	for _, sh := range shares {
		if n := min(sh.n, int(bs[sh.i].Local)); n > 0 {
			out[bs[sh.i].ID] = n
		}
	}
	return out
}

// SetShedding marks b as having its connections moved off it until until
// (rebalancing, a canary's migration): a client whose sticky cookie names
// b is placed by the pick instead, and given a cookie for where it lands,
// or a moved client would come straight back. The zero time clears it.
func (b *Backend) SetShedding(until time.Time) {
	if until.IsZero() {
		b.shedUntil.Store(0)
		return
	}
	b.shedUntil.Store(until.UnixNano())
}

// Shedding reports whether b's connections are being moved off it now.
func (b *Backend) Shedding() bool {
	u := b.shedUntil.Load()
	return u != 0 && b.now().UnixNano() < u
}

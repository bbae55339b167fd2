package main

import (
	"context"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/rebalance"
	"golang.org/x/sync/errgroup"
)

// rebalanceHost is the edge as rebalancing sees it (rebalance.Host).
type rebalanceHost struct{ e *edge }

var _ rebalance.Host = rebalanceHost{}

// Pools implements rebalance.Host: the file's pools with rebalancing on,
// and those with a canary: one that moves live connections does so at its
// rate with a narrow band, right away, over the pool's own settings.
func (h rebalanceHost) Pools() []rebalance.Pool {
	e := h.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []rebalance.Pool
	for _, ent := range e.pools {
		rc := ent.Spec.Rebalance
		p := rebalance.Pool{Name: ent.Spec.Name, Bal: ent.Bal, MinAge: rc.MinAge.Std(),
			Opts: balance.RebalanceOptions{Tolerance: rc.Tolerance, Settle: rc.Settle.Std(), Rate: rc.Rate}}
		c := ent.Bal.Canary()
		switch {
		case ent.Bal.Mode() == balance.ClientIP:
			// The hash places a client there: a canary (come through
			// Consul, or kept across a reload that changed the mode)
			// moves nobody, and rebalancing is refused by the file.
			continue
		case c != nil && c.Rate == 0:
			// A canary without a rate moves nothing, and the pool's own
			// rebalancing would weigh by the canary: its progress only.
			p.Still = true
		case c != nil && c.Rate > 0:
			p.Opts = balance.RebalanceOptions{Tolerance: rebalance.CanaryTolerance, Settle: time.Second, Rate: c.Rate}
		case !rc.Enabled:
			continue
		}
		out = append(out, p)
	}
	return out
}

// Fleet implements rebalance.Host: the fleet's count of the backend less
// this edge's own record (this edge counts its own live), and that record;
// without a fleet, nothing and -1; not ok while the fleet's numbers are
// stale.
func (h rebalanceHost) Fleet(pool, backend string) (others, own int64, ok bool) {
	f := h.e.fleet
	if f == nil {
		return 0, -1, true
	}
	if f.Status().Stale {
		return 0, 0, false
	}
	snap := f.Snapshot()
	n := snap.Total(pool, backend)
	if rec, ok := snap.Edge(snap.Self); ok {
		if p, ok := rec.Pool(pool); ok {
			own = p.Active(backend)
		}
	}
	return max(n-own, 0), own, true
}

// Move implements rebalance.Host.
func (h rebalanceHost) Move(b *balance.Backend, n int, before time.Time, window time.Duration) int {
	return h.e.proxy.Rebalance(b, n, before, window)
}

// Draining implements rebalance.Host.
func (h rebalanceHost) Draining() bool { return h.e.drainStart.Load() != 0 || h.e.admin.Draining() }

// runRebalance ticks the rebalancing of live connections on g.
func (e *edge) runRebalance(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return e.rebalance.Run(ctx) })
}

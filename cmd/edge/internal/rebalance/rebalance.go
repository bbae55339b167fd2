// Package rebalance is edge's rebalancing of live connections: once a
// second, for every pool that asks for it, it reads each backend's
// connections over the fleet (the other edges' last published counts and
// this edge's own now; this edge's alone without a fleet), asks the pool's
// balance.Rebalancer how many of this edge's connections to move off each
// backend, and has the proxy close them with 1012 (proxy.Server.Rebalance).
//
// It stops, and the next imbalance must settle again, while edge drains
// and while the fleet's numbers are stale (Consul silent): an edge moves
// nothing it cannot see. Its one goroutine is Run's.
package rebalance

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
)

// Pool is one pool with rebalancing on.
type Pool struct {
	Name string
	Bal  *balance.Pool
	Opts balance.RebalanceOptions
	// MinAge is the least age of a connection that may be moved.
	MinAge time.Duration
}

// Host is the edge as rebalancing sees it.
type Host interface {
	// Pools are the pools with rebalancing on, now.
	Pools() []Pool
	// Others is the other edges' live connections on backend of pool;
	// ok is false while the fleet's numbers are stale.
	Others(pool, backend string) (n int64, ok bool)
	// Move asks up to n connections on b opened before before to close
	// with 1012, and returns how many it asked.
	Move(b *balance.Backend, n int, before time.Time) int
	// Draining reports a drain or a hand-over under way.
	Draining() bool
}

// Status is one pool's rebalancing, for /status and the metrics.
type Status struct {
	Pool      string    `json:"pool"`
	Active    bool      `json:"active"`
	Since     time.Time `json:"since,omitzero"`
	Imbalance float64   `json:"imbalance"`
	// Moved counts the connections this edge moved since it started.
	Moved uint64 `json:"moved"`
}

// Runner rebalances the host's pools.
type Runner struct {
	host Host
	log  *slog.Logger

	mu    sync.Mutex
	pools map[string]*state // by name
}

type state struct {
	opts   balance.RebalanceOptions
	r      *balance.Rebalancer
	status Status
}

// New returns the runner of host's pools.
func New(host Host, log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{host: host, log: log, pools: map[string]*state{}}
}

// Run ticks once a second until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			r.Tick(now)
		}
	}
}

// Tick runs one round at now: every pool's plan carried out.
func (r *Runner) Tick(now time.Time) {
	pools := r.host.Pools()
	draining := r.host.Draining()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range pools {
		seen[p.Name] = true
		st := r.pools[p.Name]
		if st == nil || st.opts != p.Opts {
			// New, or its settings changed on reload: a fresh policy.
			st = &state{opts: p.Opts, r: balance.NewRebalancer(p.Opts), status: Status{Pool: p.Name}}
			r.pools[p.Name] = st
		}
		r.tickPool(now, p, st, draining)
	}
	for name := range r.pools {
		if !seen[name] {
			delete(r.pools, name)
		}
	}
}

// tickPool runs one pool's round.
func (r *Runner) tickPool(now time.Time, p Pool, st *state, draining bool) {
	loads, byID, ok := r.loads(p)
	if draining || !ok {
		if st.status.Active {
			r.log.Info("rebalance: stopped", "pool", p.Name, "draining", draining, "fleet_stale", !ok)
		}
		st.r.Stop()
		st.status.Active, st.status.Since = false, time.Time{}
		return
	}
	plan := st.r.Tick(now, loads)
	if plan.Active && !st.status.Active {
		r.log.Info("rebalance: episode started", "pool", p.Name, "imbalance", plan.Imbalance)
	}
	st.status.Active, st.status.Since, st.status.Imbalance = plan.Active, plan.Since, plan.Imbalance
	before := plan.Since
	if cut := now.Add(-p.MinAge); cut.Before(before) {
		before = cut
	}
	for _, id := range sortedKeys(plan.Moves) {
		st.status.Moved += uint64(r.host.Move(byID[id], plan.Moves[id], before))
	}
}

// loads is the pool's backends as the Rebalancer sees them; ok is false
// while the fleet's numbers are stale.
func (r *Runner) loads(p Pool) ([]balance.BackendLoad, map[string]*balance.Backend, bool) {
	bs := p.Bal.Snapshot().Backends
	out := make([]balance.BackendLoad, 0, len(bs))
	byID := make(map[string]*balance.Backend, len(bs))
	for _, b := range bs {
		others, ok := r.host.Others(p.Name, b.ID())
		if !ok {
			return nil, nil, false
		}
		w := 0.0
		if b.Available() {
			w = float64(b.Weight()) * b.SlowStartShare()
		}
		local := b.Active()
		out = append(out, balance.BackendLoad{ID: b.ID(), Weight: w, Fleet: others + local, Local: local})
		byID[b.ID()] = b
	}
	return out, byID, true
}

// Status lists every pool's rebalancing, by name.
func (r *Runner) Status() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.pools))
	for _, st := range r.pools {
		out = append(out, st.status)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if a.Pool < b.Pool {
			return -1
		}
		return 1
	})
	return out
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

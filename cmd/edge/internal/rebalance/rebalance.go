// Package rebalance is edge's rebalancing of live connections: once a
// second, for every pool that asks for it, it reads each backend's
// connections over the fleet (the other edges' last published counts and
// this edge's own now; this edge's alone without a fleet), asks the pool's
// balance.Rebalancer how many of this edge's connections to move off each
// backend, and has the proxy close them with 1012 (proxy.Server.Rebalance).
//
// A pool's canary (balance.Canary) with a rate moves live connections
// the same way: the fair shares are the canary's weights, the version's
// other side is shed entirely at promotion (and the version's at
// rollback), the budget is the canary's rate, and the band is narrow
// (CanaryTolerance), since the operator asked for that share.
//
// It stops, and the next imbalance must settle again, while edge drains,
// while the fleet's numbers are stale (Consul silent) and while an
// operator pauses the pool's moves (balance.Layer.SetPaused, of either
// scope): an edge moves nothing it cannot see.
// Its one goroutine is Run's.
package rebalance

import (
	"context"
	"log/slog"
	"slices"
	"strings"
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
	// Still: the pool is watched (a canary's progress) but nothing is moved.
	Still bool
}

// Host is the edge as rebalancing sees it.
type Host interface {
	// Pools are the pools with rebalancing on, now.
	Pools() []Pool
	// Fleet is the other edges' live connections on backend of pool, and
	// this edge's own as it last published them (-1 without a fleet), from
	// one snapshot; ok is false while the fleet's numbers are stale.
	Fleet(pool, backend string) (others, own int64, ok bool)
	// Move asks up to n connections on b opened before before to close
	// with 1012, spread over window, and returns how many it asked.
	Move(b *balance.Backend, n int, before time.Time, window time.Duration) int
	// Draining reports a drain or a hand-over under way.
	Draining() bool
}

// CanaryTolerance is the band of a canary's migration: it stops when
// every backend is within 1 % of its share.
const CanaryTolerance = 0.02

// Status is one pool's rebalancing, for /status and the metrics.
type Status struct {
	Pool      string    `json:"pool"`
	Active    bool      `json:"active"`
	Since     time.Time `json:"since,omitzero"`
	Imbalance float64   `json:"imbalance"`
	// Moved counts the connections this edge moved since it started.
	Moved uint64 `json:"moved"`
	// Paused: the operator paused the moves (SetPaused).
	Paused bool `json:"paused,omitempty"`
	// Canary is the pool's canary and its progress, when it has one.
	Canary *CanaryStatus `json:"canary,omitempty"`
}

// CanaryStatus is a canary's progress over the fleet.
type CanaryStatus struct {
	balance.Canary
	// Connections is the fleet's live connections on the version's
	// backends, Total on the pool's; Held is their ratio.
	Connections int64   `json:"connections"`
	Total       int64   `json:"total"`
	Held        float64 `json:"held"`
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
		paused := p.Bal.MovesPaused()
		r.tickPool(now, p, st, draining || paused || p.Still)
		st.status.Paused = paused
	}
	for name := range r.pools {
		if !seen[name] {
			delete(r.pools, name)
		}
	}
}

// tickPool runs one pool's round; stop ends any episode (a drain, a
// pause).
func (r *Runner) tickPool(now time.Time, p Pool, st *state, stop bool) {
	loads, byID, ok := r.loads(p)
	st.status.Canary = canaryStatus(p.Bal.Canary(), loads, byID)
	if stop || !ok {
		if st.status.Active {
			r.log.Info("rebalance: stopped", "pool", p.Name, "stopped", stop, "fleet_stale", !ok)
		}
		st.r.Stop()
		st.status.Active, st.status.Since = false, time.Time{}
		return
	}
	plan := st.r.Tick(now, loads)
	if plan.Active && !st.status.Active {
		r.log.Info("rebalance: episode started", "pool", p.Name, "imbalance", plan.Imbalance, "shedding", plan.Shedding)
	}
	st.status.Active, st.status.Since, st.status.Imbalance = plan.Active, plan.Since, plan.Imbalance
	// Marked for two ticks: a client moved by any edge, whose cookie names
	// one of these, is placed by the pick.
	for _, id := range plan.Over {
		byID[id].SetShedding(now.Add(2 * time.Second))
	}
	before := plan.Since
	if cut := now.Add(-p.MinAge); cut.Before(before) {
		before = cut
	}
	for _, id := range sortedKeys(plan.Moves) {
		st.status.Moved += uint64(r.host.Move(byID[id], plan.Moves[id], before, plan.Window))
	}
}

// loads is the pool's backends as the Rebalancer sees them, by the
// canary's weights when it has one; ok is false while the fleet's numbers
// are stale.
func (r *Runner) loads(p Pool) ([]balance.BackendLoad, map[string]*balance.Backend, bool) {
	bs := p.Bal.Snapshot().Backends
	out := make([]balance.BackendLoad, 0, len(bs))
	byID := make(map[string]*balance.Backend, len(bs))
	c := p.Bal.Canary()
	var vw, ow float64
	for _, b := range bs {
		others, own, ok := r.host.Fleet(p.Name, b.ID())
		if !ok {
			return nil, nil, false
		}
		w := 0.0
		if b.Available() {
			w = float64(b.Weight()) * b.SlowStartShare()
		}
		if c != nil && b.Version() == c.Version {
			vw += w
		} else {
			ow += w
		}
		local := b.Active()
		l := balance.BackendLoad{ID: b.ID(), Weight: w, Fleet: others + local, Local: local}
		if own >= 0 && others+own > 0 {
			l.Part = float64(own) / float64(others+own)
		}
		out = append(out, l)
		byID[b.ID()] = b
	}
	if c != nil {
		for i, b := range bs {
			if w := out[i].Weight; w > 0 {
				out[i].Weight = balance.CanaryWeight(c, b, w, vw, ow)
				out[i].Shed = out[i].Weight == 0
			}
		}
	}
	return out, byID, true
}

// canaryStatus is c's progress, from the pool's loads.
func canaryStatus(c *balance.Canary, loads []balance.BackendLoad, byID map[string]*balance.Backend) *CanaryStatus {
	if c == nil {
		return nil
	}
	st := &CanaryStatus{Canary: *c}
	for _, l := range loads {
		st.Total += l.Fleet
		if byID[l.ID].Version() == c.Version {
			st.Connections += l.Fleet
		}
	}
	if st.Total > 0 {
		st.Held = float64(st.Connections) / float64(st.Total)
	}
	return st
}

// Status lists every pool's rebalancing, by name.
func (r *Runner) Status() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.pools))
	for _, st := range r.pools {
		out = append(out, st.status)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Pool, b.Pool) })
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

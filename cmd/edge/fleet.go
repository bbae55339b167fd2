package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/internal/metrics"
	"golang.org/x/sync/errgroup"
)

// fleet is this edge's part in the fleet's load: its record, published
// and followed by discovery.FleetLoad, and the shares of fleet-scope
// limits it applies to its pools after every answer.
type fleet struct {
	e  *edge
	fl *discovery.FleetLoad

	// Owned by the publisher's goroutine (collect): the last reading of
	// each pool's opened counter, for its rate.
	opened map[*balance.Pool]openedReading

	mu sync.Mutex
	// size is the fleet size last read fresh, which fallback shares divide
	// by; 1 until Consul answered once.
	size int
	// stale is whether the last apply fell back.
	stale bool
	// limits is what the last apply set, by pool, for /status.
	limits []fleetPoolLimits
	// claims is the share of each fleet-scope backend this edge wants, by
	// pool and backend ID: published as the record's claims, enforced once
	// Consul holds them (raised in published, lowered at once in apply).
	claims map[string]map[string]int64
}

// openedReading is one reading of a pool's opened counter.
type openedReading struct {
	n  int64
	at time.Time
}

// fleetPoolLimits is one pool's fleet-scope limits as applied, for /status.
type fleetPoolLimits struct {
	Pool string `json:"pool"`
	// MaxConnectionsPerBackend is the fleet's limit; Backends this edge's
	// share of it, by backend ID.
	MaxConnectionsPerBackend int64            `json:"max_connections_per_backend,omitempty"`
	Backends                 map[string]int64 `json:"backend_shares,omitempty"`
	// ConnectionRate is the fleet's rate; RateShare this edge's.
	ConnectionRate float64 `json:"connection_rate,omitempty"`
	RateShare      float64 `json:"connection_rate_share,omitempty"`
	// Fallback is true when the shares are the limit divided by the last
	// known fleet size (the fleet's numbers are stale).
	Fallback bool `json:"fallback"`
}

// fleetID is cfg's edge id in the fleet: consul.fleet.id, else the host
// name and the admin address (which no two edges on a host share), made
// one KV key segment.
func fleetID(cfg *conf.Config) string {
	if id := cfg.Consul.Fleet.ID; id != "" {
		return id
	}
	host, _ := os.Hostname()
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:", r) {
			return r
		}
		return '-'
	}, host+"-"+cfg.Admin.Address)
}

// newFleet makes the fleet load of cfg, or nil without consul.fleet.prefix.
func (e *edge) newFleet(cfg *conf.Config) error {
	fc := cfg.Consul.Fleet
	if fc.Prefix == "" {
		return nil
	}
	// stale from the start: the first apply falls back without a warning.
	f := &fleet{e: e, opened: map[*balance.Pool]openedReading{}, size: 1, stale: true, claims: map[string]map[string]int64{}}
	fl, err := discovery.NewFleetLoad(discovery.FleetLoadOptions{
		Client: e.dyn.client, Prefix: fc.Prefix, ID: fleetID(cfg),
		Collect: f.collect, Known: f.known, Published: f.published,
		PublishEvery: fc.PublishEvery.Std(), SessionTTL: fc.SessionTTL.Std(), StaleAfter: fc.StaleAfter.Std(),
		Logger: e.log,
	})
	if err != nil {
		return fmt.Errorf("consul.fleet: %w", err)
	}
	f.fl = fl
	e.fleet = f
	e.metrics.WatchFleet(metrics.Fleet{Status: fl.Status, Shares: f.shares})
	// Shares from the first connection: the fallback until Consul answers.
	f.apply()
	return nil
}

// run publishes, follows and applies on g until ctx ends.
func (f *fleet) run(ctx context.Context, g *errgroup.Group) {
	if f == nil {
		return
	}
	g.Go(func() error { return f.fl.Run(ctx) })
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-f.fl.Changed():
				f.apply()
			}
		}
	})
}

// known accepts the pools this edge serves and their members: a record
// naming anything else is cut to what this edge has.
func (f *fleet) known(pool, backend string) bool {
	for _, p := range f.e.allPools() {
		if p.Name() != pool {
			continue
		}
		if backend == "" {
			return true
		}
		return slices.ContainsFunc(p.Snapshot().Backends, func(b *balance.Backend) bool { return b.ID() == backend })
	}
	return false
}

// collect is this edge's record now. Rates are rounded to a tenth of a
// connection per second, so an idle edge's record stops changing.
func (f *fleet) collect() discovery.FleetRecord {
	now := time.Now()
	r := discovery.FleetRecord{Version: currentBuild().Version, PID: os.Getpid(), Ready: f.e.ready(), Connections: int64(f.e.proxy.Active())}
	if f.e.admin != nil {
		r.Address = f.e.admin.Addr().String()
	}
	seen := map[*balance.Pool]bool{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.e.allPools() {
		seen[p] = true
		claims := f.claims[p.Name()]
		pl := discovery.FleetPoolLoad{Name: p.Name(), Rate: f.rate(p, now), Shared: claims != nil}
		for _, b := range p.Snapshot().Backends {
			if n, c := b.Active(), claims[b.ID()]; n > 0 || pl.Shared {
				pl.Backends = append(pl.Backends, discovery.FleetBackendLoad{ID: b.ID(), Active: n, Claim: c})
			}
		}
		slices.SortFunc(pl.Backends, func(a, b discovery.FleetBackendLoad) int { return strings.Compare(a.ID, b.ID) })
		r.Pools = append(r.Pools, pl)
	}
	slices.SortFunc(r.Pools, func(a, b discovery.FleetPoolLoad) int { return strings.Compare(a.Name, b.Name) })
	r.Pools = slices.CompactFunc(r.Pools, func(a, b discovery.FleetPoolLoad) bool { return a.Name == b.Name })
	for p := range f.opened {
		if !seen[p] {
			delete(f.opened, p) // replaced by a reload
		}
	}
	return r
}

// rate is p's rate of new connections since the last reading.
func (f *fleet) rate(p *balance.Pool, now time.Time) float64 {
	n := p.Opened()
	last, ok := f.opened[p]
	f.opened[p] = openedReading{n: n, at: now}
	el := now.Sub(last.at).Seconds()
	if !ok || el <= 0 {
		return 0
	}
	return math.Round(float64(n-last.n)/el*10) / 10
}

// published raises the shares this edge enforces to the claims Consul now
// holds (never above what it still wants): the other edges can count them.
func (f *fleet) published(r discovery.FleetRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return
	}
	for _, p := range f.e.allPools() {
		want := f.claims[p.Name()]
		pl, ok := r.Pool(p.Name())
		if want == nil || !ok || !pl.Shared {
			continue
		}
		for _, b := range p.Snapshot().Backends {
			c := min(pl.Backend(b.ID()).Claim, want[b.ID()])
			if cur, _ := b.ConnLimit(); c > cur {
				b.SetConnShare(c)
			}
		}
	}
}

// ready is what /readyz answers.
func (e *edge) ready() bool { return e.admin != nil && e.admin.Ready() }

// apply sets every fleet-scope limit's share from the fleet as last read,
// or the fallback when that is stale.
func (f *fleet) apply() {
	st := f.fl.Status()
	snap := f.fl.Snapshot()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !st.Stale {
		f.size = snap.Size()
	}
	if st.Stale != f.stale {
		if st.Stale {
			f.e.log.Warn("fleet numbers stale: fleet-scope limits fall back to the limit divided by the last known fleet size",
				"fleet_size", f.size, "age", st.Age.Round(time.Millisecond).String(), "err", st.LastError)
		} else {
			f.e.log.Info("fleet numbers fresh again: fleet-scope limits shared by the fleet's counts", "fleet_size", f.size)
		}
		f.stale = st.Stale
	}
	f.e.mu.Lock()
	pools := make([]*poolEntry, 0, len(f.e.pools))
	for _, ent := range f.e.pools {
		pools = append(pools, ent)
	}
	f.e.mu.Unlock()
	f.limits = f.limits[:0]
	for _, ent := range pools {
		if l, ok := f.applyPool(ent, snap, st.Stale); ok {
			f.limits = append(f.limits, l)
		}
	}
	slices.SortFunc(f.limits, func(a, b fleetPoolLimits) int { return strings.Compare(a.Pool, b.Pool) })
}

// applyPool sets one pool's shares; ok is false when it has no fleet-scope
// limit.
func (f *fleet) applyPool(ent *poolEntry, snap *discovery.FleetSnapshot, stale bool) (fleetPoolLimits, bool) {
	lim := ent.spec.fleet
	conns, rate := lim.conns, lim.rate
	if conns == 0 {
		// Local scope (again, after a reload): the pool's own limit.
		for _, b := range ent.bal.Snapshot().Backends {
			if _, shared := b.ConnLimit(); shared {
				b.SetConnShare(-1)
			}
		}
		delete(f.claims, ent.spec.name)
	}
	if conns == 0 && rate == 0 {
		return fleetPoolLimits{}, false
	}
	out := fleetPoolLimits{Pool: ent.spec.name, Fallback: stale}
	loads, self, w := fleetColumns(snap, ent.spec.name, fleetRateCap(lim))
	if conns > 0 {
		out.MaxConnectionsPerBackend, out.Backends = conns, map[string]int64{}
		claims := map[string]int64{}
		for _, b := range ent.bal.Snapshot().Backends {
			claims[b.ID()] = f.shareOf(b, conns, loads, self, w, stale)
			out.Backends[b.ID()], _ = b.ConnLimit()
		}
		f.claims[ent.spec.name] = claims
	}
	if rate > 0 {
		share := rate / float64(f.size)
		if !stale {
			share = balance.RateShare(rate, w, rate/float64(10*len(snap.Edges)+10))
		}
		burst := 0
		if lim.burst > 0 {
			burst = max(1, int(math.Round(float64(lim.burst)*share/rate)))
		}
		ent.admit.SetRate(share, burst)
		out.ConnectionRate, out.RateShare = rate, share
	}
	return out, true
}

// shareOf sets b's share on this edge and returns the claim to publish:
// stale, the fallback at once; else the smaller of ConnShare (this edge's
// part of the room the counts leave) and ClaimCap (what the others' counts
// and claims leave), applied at once when it lowers the share and once
// published (fleet.published) when it raises it. A backend without a share
// yet (new in the pool) takes it at once.
func (f *fleet) shareOf(b *balance.Backend, limit int64, loads []discovery.FleetPoolLoad, self int, w float64, stale bool) int64 {
	if stale {
		n := balance.FallbackConnShare(limit, f.size)
		b.SetConnShare(n)
		return n
	}
	counts, held := make([]int64, len(loads)), make([]int64, len(loads))
	for i, l := range loads {
		// No edge can hold more than the fleet's limit: a record counts
		// for at most that, whatever its writer put in it.
		counts[i], held[i] = min(l.Active(b.ID()), limit), min(l.Held(b.ID()), limit)
	}
	n := min(balance.ConnShare(limit, counts, self, w), balance.ClaimCap(limit, held, self))
	if cur, shared := b.ConnLimit(); !shared || n < cur {
		b.SetConnShare(n)
	}
	return n
}

// maxFleetEdgeRate bounds the rate of new connections (per second) one
// edge's record counts for in the edge weights, far above what one process
// accepts: a record of anyone who can write the prefix cannot take the
// whole rate-weighted half of the room from every real edge.
const maxFleetEdgeRate = 100_000

// fleetRateCap is the most a record's rate counts for in a pool's edge
// weights: with a fleet-scope connection_rate no edge admits more than the
// fleet's rate and burst in a second, else maxFleetEdgeRate.
func fleetRateCap(lim fleetLimits) float64 {
	if lim.rate > 0 {
		return min(maxFleetEdgeRate, lim.rate+float64(lim.burst))
	}
	return maxFleetEdgeRate
}

// fleetColumns returns one pool's load on every edge of snap (this edge's
// own record included, at self, empty when it has none yet) and this
// edge's weight in the fleet, every record's rate counted for at most
// rateCap.
func fleetColumns(snap *discovery.FleetSnapshot, pool string, rateCap float64) (loads []discovery.FleetPoolLoad, self int, weight float64) {
	edges := slices.Clone(snap.Edges)
	self = slices.IndexFunc(edges, func(r discovery.FleetRecord) bool { return r.ID == snap.Self })
	if self < 0 {
		edges = append(edges, discovery.FleetRecord{ID: snap.Self})
		self = len(edges) - 1
	}
	loads = make([]discovery.FleetPoolLoad, len(edges))
	rates := make([]float64, len(edges))
	for i, r := range edges {
		loads[i], _ = r.Pool(pool)
		rates[i] = min(loads[i].Rate, rateCap)
	}
	return loads, self, balance.EdgeWeights(rates)[self]
}

// fleetDoc is /status's view of the fleet: this edge's place in it, every
// edge's record as last read, and the shares applied.
type fleetDoc struct {
	discovery.FleetLoadStatus
	Snapshot *discovery.FleetSnapshot `json:"snapshot"`
	Limits   []fleetPoolLimits        `json:"limits"`
}

// doc is the fleet's /status entry; nil without a fleet.
func (f *fleet) doc() *fleetDoc {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	limits := slices.Clone(f.limits)
	f.mu.Unlock()
	return &fleetDoc{FleetLoadStatus: f.fl.Status(), Snapshot: f.fl.Snapshot(), Limits: limits}
}

// shares are the shares of fleet-scope limits the last apply set, for the
// metrics.
func (f *fleet) shares() []metrics.FleetShare {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []metrics.FleetShare
	for _, l := range f.limits {
		for id, n := range l.Backends {
			out = append(out, metrics.FleetShare{Pool: l.Pool, Backend: id, Share: n})
		}
	}
	return out
}

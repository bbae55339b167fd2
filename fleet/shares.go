package fleet

import (
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
)

// Shares is this edge's side of the fleet's load: the pools' part of
// the record it publishes (Loads), and the shares of fleet-scope limits it
// applies to its pools from every answer (Apply) or the stale fallback.
// The functions of balance compute the shares; Shares decides which
// numbers they get, when a share is raised or lowered, and keeps the last
// result for /status and the metrics. Safe for concurrent use.
type Shares struct {
	log *slog.Logger

	mu sync.Mutex
	// opened is the last reading of each pool's opened counter, for its
	// rate.
	opened map[*balance.Pool]openedReading
	// size is the fleet size last read fresh, which fallback shares divide
	// by; 1 until Consul answered once.
	size int
	// stale is whether the last apply fell back.
	stale bool
	// limits is what the last apply set, by pool, for /status.
	limits []PoolLimits
	// claims is the share of each fleet-scope backend this edge wants, by
	// pool and backend ID: published as the record's claims, enforced once
	// Consul holds them (raised in Published, lowered at once in Apply).
	claims map[string]map[string]int64
}

// openedReading is one reading of a pool's opened counter.
type openedReading struct {
	n  int64
	at time.Time
}

// Pool is one pool this edge serves as Apply sees it: its limits of
// fleet scope (0 is none, the pool's own limits apply) and the parts they
// set.
type Pool struct {
	Name string
	// Pool holds the backends whose connection limit becomes a share.
	Pool *balance.Pool
	// Admit is the pool's bucket whose rate becomes a share; only read
	// when ConnectionRate is set.
	Admit *balance.Bucket
	// MaxConnectionsPerBackend, ConnectionRate and ConnectionBurst are the
	// fleet's limits.
	MaxConnectionsPerBackend int64
	ConnectionRate           float64
	ConnectionBurst          int
	// Subjects, when set, is the pool's per-subject counts for a
	// per-subject limit of fleet scope (subjects.go).
	Subjects SubjectSource
}

// PoolLimits is one pool's fleet-scope limits as applied, for /status.
type PoolLimits struct {
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

// NewShares returns shares that start stale, so the first Apply falls
// back (to the whole limit: the fleet size is 1 until Consul answered)
// without a warning. log receives the changes between fresh and stale.
func NewShares(log *slog.Logger) *Shares {
	if log == nil {
		log = slog.Default()
	}
	return &Shares{log: log, opened: map[*balance.Pool]openedReading{}, size: 1, stale: true, claims: map[string]map[string]int64{}}
}

// Loads is the pools' part of this edge's record now: every pool's rate of
// new connections since the last call, rounded to a tenth of a connection
// per second so an idle edge's record stops changing, its backends with
// connections and, for a pool of fleet scope, every backend with its claim.
// Pools are sorted by name, one record a name.
func (s *Shares) Loads(pools []*balance.Pool, now time.Time) []PoolLoad {
	var out []PoolLoad
	seen := map[*balance.Pool]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range pools {
		seen[p] = true
		claims := s.claims[p.Name()]
		pl := PoolLoad{Name: p.Name(), Rate: s.rate(p, now), Shared: claims != nil}
		for _, b := range p.Snapshot().Backends {
			if n, c := b.Active(), claims[b.ID()]; n > 0 || pl.Shared {
				pl.Backends = append(pl.Backends, BackendLoad{ID: b.ID(), Active: n, Claim: c})
			}
		}
		slices.SortFunc(pl.Backends, func(a, b BackendLoad) int { return strings.Compare(a.ID, b.ID) })
		out = append(out, pl)
	}
	slices.SortFunc(out, func(a, b PoolLoad) int { return strings.Compare(a.Name, b.Name) })
	out = slices.CompactFunc(out, func(a, b PoolLoad) bool { return a.Name == b.Name })
	for p := range s.opened {
		if !seen[p] {
			delete(s.opened, p) // replaced by a reload
		}
	}
	return out
}

// rate is p's rate of new connections since the last reading.
func (s *Shares) rate(p *balance.Pool, now time.Time) float64 {
	n := p.Opened()
	last, ok := s.opened[p]
	s.opened[p] = openedReading{n: n, at: now}
	el := now.Sub(last.at).Seconds()
	if !ok || el <= 0 {
		return 0
	}
	return math.Round(float64(n-last.n)/el*10) / 10
}

// Published raises the shares this edge enforces to the claims Consul now
// holds in r, this edge's record as written (never above what it still
// wants): the other edges can count them.
func (s *Shares) Published(r Record, pools []*balance.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale {
		return
	}
	for _, p := range pools {
		want := s.claims[p.Name()]
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

// Apply sets every fleet-scope limit's share from the fleet as last read
// (st and snap, from Load), or the fallback when st is stale; a pool
// back to local scope gets its own limit back.
func (s *Shares) Apply(st LoadStatus, snap *Snapshot, pools []Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !st.Stale {
		s.size = snap.Size()
	}
	if st.Stale != s.stale {
		if st.Stale {
			s.log.Warn("fleet numbers stale: fleet-scope limits fall back to the limit divided by the last known fleet size",
				"fleet_size", s.size, "age", st.Age.Round(time.Millisecond).String(), "err", st.LastError)
		} else {
			s.log.Info("fleet numbers fresh again: fleet-scope limits shared by the fleet's counts", "fleet_size", s.size)
		}
		s.stale = st.Stale
	}
	s.limits = s.limits[:0]
	for _, p := range pools {
		if l, ok := s.applyPool(p, snap, st.Stale); ok {
			s.limits = append(s.limits, l)
		}
	}
	slices.SortFunc(s.limits, func(a, b PoolLimits) int { return strings.Compare(a.Pool, b.Pool) })
}

// applyPool sets one pool's shares; ok is false when it has no fleet-scope
// limit.
func (s *Shares) applyPool(p Pool, snap *Snapshot, stale bool) (PoolLimits, bool) {
	conns, rate := p.MaxConnectionsPerBackend, p.ConnectionRate
	if conns == 0 {
		// Local scope (again, after a reload): the pool's own limit.
		for _, b := range p.Pool.Snapshot().Backends {
			if _, shared := b.ConnLimit(); shared {
				b.SetConnShare(-1)
			}
		}
		delete(s.claims, p.Name)
	}
	if conns == 0 && rate == 0 {
		return PoolLimits{}, false
	}
	out := PoolLimits{Pool: p.Name, Fallback: stale}
	loads, self, w := fleetColumns(snap, p.Name, fleetRateCap(p))
	if conns > 0 {
		out.MaxConnectionsPerBackend, out.Backends = conns, map[string]int64{}
		claims := map[string]int64{}
		for _, b := range p.Pool.Snapshot().Backends {
			claims[b.ID()] = s.shareOf(b, conns, loads, self, w, stale)
			out.Backends[b.ID()], _ = b.ConnLimit()
		}
		s.claims[p.Name] = claims
	}
	if rate > 0 {
		share := rate / float64(s.size)
		if !stale {
			share = balance.RateShare(rate, w, rate/float64(10*len(snap.Edges)+10))
		}
		burst := 0
		if p.ConnectionBurst > 0 {
			burst = max(1, int(math.Round(float64(p.ConnectionBurst)*share/rate)))
		}
		p.Admit.SetRate(share, burst)
		out.ConnectionRate, out.RateShare = rate, share
	}
	return out, true
}

// shareOf sets b's share on this edge and returns the claim to publish:
// stale, the fallback at once; else the smaller of ConnShare (this edge's
// part of the room the counts leave) and ClaimCap (what the others' counts
// and claims leave), applied at once when it lowers the share and once
// published (Published) when it raises it. A backend without a share yet
// (new in the pool) takes it at once.
func (s *Shares) shareOf(b *balance.Backend, limit int64, loads []PoolLoad, self int, w float64, stale bool) int64 {
	if stale {
		n := balance.FallbackConnShare(limit, s.size)
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
func fleetRateCap(p Pool) float64 {
	if p.ConnectionRate > 0 {
		return min(maxFleetEdgeRate, p.ConnectionRate+float64(p.ConnectionBurst))
	}
	return maxFleetEdgeRate
}

// fleetColumns returns one pool's load on every edge of snap (this edge's
// own record included, at self, empty when it has none yet) and this
// edge's weight in the fleet, every record's rate counted for at most
// rateCap.
func fleetColumns(snap *Snapshot, pool string, rateCap float64) (loads []PoolLoad, self int, weight float64) {
	edges := slices.Clone(snap.Edges)
	self = slices.IndexFunc(edges, func(r Record) bool { return r.ID == snap.Self })
	if self < 0 {
		edges = append(edges, Record{ID: snap.Self})
		self = len(edges) - 1
	}
	loads = make([]PoolLoad, len(edges))
	rates := make([]float64, len(edges))
	for i, r := range edges {
		loads[i], _ = r.Pool(pool)
		rates[i] = min(loads[i].Rate, rateCap)
	}
	return loads, self, balance.EdgeWeights(rates)[self]
}

// Limits returns what the last Apply set, by pool sorted by name. Apply
// makes new maps, so the ones returned are never written again.
func (s *Shares) Limits() []PoolLimits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.limits)
}

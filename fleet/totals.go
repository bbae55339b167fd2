package fleet

import (
	"slices"
	"strings"
)

// PoolTotal is one pool summed over every edge's published record.
type PoolTotal struct {
	Pool string `json:"pool"`
	// Rate is the sum of the edges' recent rates of new connections, per
	// second.
	Rate float64 `json:"rate"`
	// Active is every connection of the pool over the fleet.
	Active int64 `json:"active"`
	// Edges is how many edges published the pool.
	Edges    int            `json:"edges"`
	Backends []BackendTotal `json:"backends"`
}

// BackendTotal is one backend's connections over the fleet.
type BackendTotal struct {
	ID     string `json:"id"`
	Active int64  `json:"active"`
}

// Totals sums the records of s per pool and backend, sorted by name: the
// fleet's totals that /status and the status page show. The records are
// bounded by what a Load accepts (MaxEdges, MaxPools, MaxBackends), so the
// sums are too. A nil snapshot has none.
func (s *Snapshot) Totals() []PoolTotal {
	if s == nil {
		return nil
	}
	pools := map[string]*PoolTotal{}
	backends := map[string]map[string]int64{}
	for _, r := range s.Edges {
		for _, p := range r.Pools {
			t := pools[p.Name]
			if t == nil {
				t = &PoolTotal{Pool: p.Name}
				pools[p.Name], backends[p.Name] = t, map[string]int64{}
			}
			t.Rate += p.Rate
			t.Edges++
			for _, b := range p.Backends {
				t.Active += b.Active
				backends[p.Name][b.ID] += b.Active
			}
		}
	}
	out := make([]PoolTotal, 0, len(pools))
	for name, t := range pools {
		for id, n := range backends[name] {
			t.Backends = append(t.Backends, BackendTotal{ID: id, Active: n})
		}
		slices.SortFunc(t.Backends, func(a, b BackendTotal) int { return strings.Compare(a.ID, b.ID) })
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b PoolTotal) int { return strings.Compare(a.Pool, b.Pool) })
	return out
}

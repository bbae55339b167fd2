package main

import (
	"slices"
	"strings"

	"github.com/edgelb/edge/fleet"
)

// fleetPoolTotal is one pool summed over every edge's published record.
type fleetPoolTotal struct {
	Pool string `json:"pool"`
	// Rate is the sum of the edges' recent rates of new connections, per
	// second.
	Rate float64 `json:"rate"`
	// Active is every connection of the pool over the fleet.
	Active int64 `json:"active"`
	// Edges is how many edges published the pool.
	Edges    int                 `json:"edges"`
	Backends []fleetBackendTotal `json:"backends"`
}

// fleetBackendTotal is one backend's connections over the fleet.
type fleetBackendTotal struct {
	ID     string `json:"id"`
	Active int64  `json:"active"`
}

// fleetTotals sums the records of s per pool and backend, sorted by name:
// the fleet's totals that /status and the status page show. The records
// are bounded by what discovery accepts (MaxFleetEdges, MaxFleetPools,
// MaxFleetBackends), so the sums are too.
func fleetTotals(s *fleet.Snapshot) []fleetPoolTotal {
	if s == nil {
		return nil
	}
	pools := map[string]*fleetPoolTotal{}
	backends := map[string]map[string]int64{}
	for _, r := range s.Edges {
		for _, p := range r.Pools {
			t := pools[p.Name]
			if t == nil {
				t = &fleetPoolTotal{Pool: p.Name}
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
	out := make([]fleetPoolTotal, 0, len(pools))
	for name, t := range pools {
		for id, n := range backends[name] {
			t.Backends = append(t.Backends, fleetBackendTotal{ID: id, Active: n})
		}
		slices.SortFunc(t.Backends, func(a, b fleetBackendTotal) int { return strings.Compare(a.ID, b.ID) })
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b fleetPoolTotal) int { return strings.Compare(a.Pool, b.Pool) })
	return out
}

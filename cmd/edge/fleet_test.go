package main

import (
	"math"
	"testing"

	"github.com/edgelb/edge/discovery"
)

// TestFleetColumnsBoundHostileRate: a record written by anyone who can
// write the prefix, with the largest rate a record may carry (2^40), counts
// for at most the fleet's rate and burst in the edge weights, so a real
// edge keeps its rate-weighted part of the room instead of the floor alone.
func TestFleetColumnsBoundHostileRate(t *testing.T) {
	snap := &discovery.FleetSnapshot{Self: "a", Edges: []discovery.FleetRecord{
		{ID: "a", Pools: []discovery.FleetPoolLoad{{Name: "app", Rate: 10}}},
		{ID: "z", Pools: []discovery.FleetPoolLoad{{Name: "app", Rate: 1 << 40}}},
	}}
	lim := fleetLimits{conns: 100, rate: 8, burst: 2}
	_, self, w := fleetColumns(snap, "app", fleetRateCap(lim))
	// Both at the cap of 10 a second: even weights.
	if self != 0 || math.Abs(w-0.5) > 1e-9 {
		t.Errorf("weight of a beside a hostile rate: %v (self %d), want 0.5", w, self)
	}
	if got := fleetRateCap(fleetLimits{conns: 100}); got != maxFleetEdgeRate {
		t.Errorf("rate cap without a fleet rate: %v, want %v", got, float64(maxFleetEdgeRate))
	}
}

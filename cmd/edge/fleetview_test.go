package main

import (
	"reflect"
	"testing"

	"github.com/edgelb/edge/fleet"
)

// TestFleetTotals: the fleet's totals sum every edge's record per pool and
// backend, whatever edges publish which pools.
func TestFleetTotals(t *testing.T) {
	s := &fleet.Snapshot{Self: "a", Edges: []fleet.Record{
		{ID: "a", Pools: []fleet.PoolLoad{{Name: "app", Rate: 1.5, Backends: []fleet.BackendLoad{{ID: "b1", Active: 3}, {ID: "b2", Active: 1}}}}},
		{ID: "b", Pools: []fleet.PoolLoad{
			{Name: "app", Rate: 0.5, Backends: []fleet.BackendLoad{{ID: "b2", Active: 4}}},
			{Name: "chat", Backends: []fleet.BackendLoad{{ID: "c1", Active: 2}}},
		}},
	}}
	want := []fleetPoolTotal{
		{Pool: "app", Rate: 2, Active: 8, Edges: 2, Backends: []fleetBackendTotal{{"b1", 3}, {"b2", 5}}},
		{Pool: "chat", Active: 2, Edges: 1, Backends: []fleetBackendTotal{{"c1", 2}}},
	}
	if got := fleetTotals(s); !reflect.DeepEqual(got, want) {
		t.Errorf("fleetTotals:\n got %+v\nwant %+v", got, want)
	}
	if got := fleetTotals(nil); got != nil {
		t.Errorf("no snapshot: %v", got)
	}
}

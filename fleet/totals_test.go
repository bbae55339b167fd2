package fleet

import (
	"reflect"
	"testing"
)

// TestFleetTotals: the fleet's totals sum every edge's record per pool and
// backend, whatever edges publish which pools.
func TestFleetTotals(t *testing.T) {
	s := &Snapshot{Self: "a", Edges: []Record{
		{ID: "a", Pools: []PoolLoad{{Name: "app", Rate: 1.5, Backends: []BackendLoad{{ID: "b1", Active: 3}, {ID: "b2", Active: 1}}}}},
		{ID: "b", Pools: []PoolLoad{
			{Name: "app", Rate: 0.5, Backends: []BackendLoad{{ID: "b2", Active: 4}}},
			{Name: "chat", Backends: []BackendLoad{{ID: "c1", Active: 2}}},
		}},
	}}
	want := []PoolTotal{
		{Pool: "app", Rate: 2, Active: 8, Edges: 2, Backends: []BackendTotal{{"b1", 3}, {"b2", 5}}},
		{Pool: "chat", Active: 2, Edges: 1, Backends: []BackendTotal{{"c1", 2}}},
	}
	if got := s.Totals(); !reflect.DeepEqual(got, want) {
		t.Errorf("Totals:\n got %+v\nwant %+v", got, want)
	}
	if got := (*Snapshot)(nil).Totals(); got != nil {
		t.Errorf("no snapshot: %v", got)
	}
}

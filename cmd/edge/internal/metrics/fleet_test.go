package metrics

import (
	"testing"
	"time"

	"github.com/edgelb/edge/fleet"
)

// TestFleetSeries: the fleet's gauges say what the fleet load's status
// does, from the first scrape.
func TestFleetSeries(t *testing.T) {
	m := New(Options{})
	st := fleet.LoadStatus{Stale: true, Age: 12 * time.Second, Edges: 3, Writes: 7, Refused: 4, Unheld: 4}
	m.WatchFleet(Fleet{Status: func() fleet.LoadStatus { return st },
		Shares: func() []FleetShare { return []FleetShare{{Pool: "app", Backend: "b1", Share: 50}} }})
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			v := x.GetGauge().GetValue() + x.GetCounter().GetValue()
			if mf.GetName() == "edge_fleet_keys_refused" && x.GetLabel()[0].GetValue() != "unheld" {
				continue
			}
			got[mf.GetName()] = v
		}
	}
	for name, want := range map[string]float64{"edge_fleet_stale": 1, "edge_fleet_sums_age_seconds": 12, "edge_fleet_edges": 3, "edge_fleet_writes_total": 7, "edge_fleet_wakeups_total": 0, "edge_fleet_backend_share": 50, "edge_fleet_keys_refused": 4} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

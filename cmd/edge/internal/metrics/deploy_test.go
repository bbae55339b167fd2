package metrics

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDeployReferencesExistingMetrics keeps the alert rules and the Grafana
// dashboard in deploy/ honest: every edge_* series they query is exported.
func TestDeployReferencesExistingMetrics(t *testing.T) {
	m := New(Options{})
	m.WatchState(State{})
	m.WatchFleet(Fleet{})
	known := m.Names()
	ref := regexp.MustCompile(`edge_[a-z_]+`)
	for _, f := range []string{"../../../../deploy/prometheus/alerts.yml", "../../../../deploy/grafana/edge-dashboard.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range ref.FindAllString(string(b), -1) {
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suf)
			}
			if name == "edge_overview" || strings.HasPrefix(name, "edge_dashboard") {
				continue
			}
			if !known[base] {
				t.Errorf("%s refers to %s, which edge does not export", f, name)
			}
		}
	}
}

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/edgelb/edge/balance"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDeployReferencesExistingMetrics keeps the alert rules and the Grafana
// dashboard in deploy/ honest: every edge_* series they query is exported.
func TestDeployReferencesExistingMetrics(t *testing.T) {
	m := newMetrics(func() []*balance.Pool { return nil })
	m.watchState(stateSource{})
	m.reg.MustRegister(certCollector{})
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		m.reg.Describe(ch)
		close(ch)
	}()
	known := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if mm := fq.FindStringSubmatch(d.String()); mm != nil {
			known[mm[1]] = true
		}
	}
	ref := regexp.MustCompile(`edge_[a-z_]+`)
	for _, f := range []string{"../../deploy/prometheus/alerts.yml", "../../deploy/grafana/edge-dashboard.json"} {
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

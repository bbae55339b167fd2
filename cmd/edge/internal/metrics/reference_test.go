package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// metricRow matches a row of docs/METRICS.md's metrics table: name, type,
// labels.
var metricRow = regexp.MustCompile("(?m)^\\| `(edge_\\w+)` \\| (\\w+) \\|([^|]*)\\|")

// TestMetricsReferenceMatchesRegistry keeps docs/METRICS.md true to the
// registry: every edge_* metric the registry describes has a row, every row
// names one it describes, and each row's labels are exactly the metric's
// (fixed or variable; a label's values, in parentheses, are prose). A metric or a label added
// without its row fails here.
func TestMetricsReferenceMatchesRegistry(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{}
	for _, mm := range metricRow.FindAllStringSubmatch(string(b), -1) {
		if _, dup := documented[mm[1]]; dup {
			t.Errorf("docs/METRICS.md: %s has two rows", mm[1])
		}
		documented[mm[1]] = labelNames(mm[3])
	}
	registered := registeredLabels(t)
	if len(registered) < 40 {
		t.Fatalf("only %d edge_* metrics described: the walk is broken", len(registered))
	}
	for name, labels := range registered {
		doc, ok := documented[name]
		if !ok {
			t.Errorf("%s is registered but docs/METRICS.md has no row for it", name)
			continue
		}
		if !slices.Equal(doc, labels) {
			t.Errorf("docs/METRICS.md: %s has labels %v, the registry's are %v", name, doc, labels)
		}
	}
	for name := range documented {
		if _, ok := registered[name]; !ok {
			t.Errorf("docs/METRICS.md lists %s, which the registry does not describe", name)
		}
	}
}

// labelNames returns the label names of a labels cell, "pool, direction
// (in: client to backend, out)", sorted; what is in parentheses is left out.
func labelNames(cell string) []string {
	cell = regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(cell, "")
	out := []string{}
	for _, f := range strings.Split(cell, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// registeredLabels returns every edge_* metric the registry describes, the
// fleet's and the state gauges included, with its sorted variable labels.
func registeredLabels(t *testing.T) map[string][]string {
	t.Helper()
	m := New(Options{})
	m.WatchState(State{})
	m.WatchFleet(Fleet{})
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		m.reg.Describe(ch)
		close(ch)
	}()
	desc := regexp.MustCompile(`fqName: "([^"]+)".*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)
	constName := regexp.MustCompile(`(\w+)="[^"]*"`)
	out := map[string][]string{}
	for d := range ch {
		mm := desc.FindStringSubmatch(d.String())
		if mm == nil {
			t.Fatalf("cannot read %s", d)
		}
		if !strings.HasPrefix(mm[1], "edge_") {
			continue
		}
		labels := labelNames(mm[3])
		for _, c := range constName.FindAllStringSubmatch(mm[2], -1) {
			labels = append(labels, c[1]) // edge_build_info's, fixed at start
		}
		slices.Sort(labels)
		out[mm[1]] = labels
	}
	return out
}

package edge_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/edgelb/edge"

// TestImportRules keeps the package picture of docs/ARCHITECTURE.md true:
// dependencies point toward pure logic, and only cmd/edge knows Prometheus,
// the config schema and the TLS terminator.
func TestImportRules(t *testing.T) {
	rules := []struct {
		pkg      string
		ours     []string // packages of ours it may import
		forbid   []string // import-path prefixes it must not reach
		noStdNet bool     // forbid net/http (pure logic)
	}{
		{pkg: "balance", noStdNet: true},
		{pkg: "internal/hostname", noStdNet: true},
		{pkg: "conf", ours: []string{"internal/hostname"}},
		{pkg: "tls"},
		{pkg: "proxy", ours: []string{"balance", "internal/hostname", "internal/wswire", "proxy/internal/wsession", "proxy/internal/handoff"}},
		{pkg: "proxy/internal/handoff"},
		{pkg: "discovery", ours: []string{"balance", "internal/hostname"}},
		{pkg: "health", ours: []string{"balance", "internal/wswire"}},
		{pkg: "internal/wswire", noStdNet: true},
	}
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+r.pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list ./%s: %v\n%s", r.pkg, err, out)
			}
			allowed := map[string]bool{module + "/" + r.pkg: true}
			for _, o := range r.ours {
				allowed[module+"/"+o] = true
			}
			for _, dep := range strings.Fields(string(out)) {
				if strings.HasPrefix(dep, module+"/") && !allowed[dep] {
					t.Errorf("%s imports %s; allowed of ours: %v", r.pkg, dep, r.ours)
				}
				if strings.HasPrefix(dep, "github.com/prometheus/") {
					t.Errorf("%s reaches %s: only cmd/edge may know Prometheus", r.pkg, dep)
				}
				if r.noStdNet && dep == "net/http" {
					t.Errorf("%s reaches net/http: it must stay pure logic", r.pkg)
				}
			}
		})
	}
}

// TestBenchImportsNothingOfEdge keeps the benchmark a separate module that
// measures edge from outside: its programs import nothing of edge, so the
// figures cannot depend on edge's internals. (Its tests may: they check the
// benchmark's edge configuration with edge's own loader.)
func TestBenchImportsNothingOfEdge(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = "bench"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./... in bench: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/bench" && !strings.HasPrefix(dep, module+"/bench/") {
			t.Errorf("bench imports %s: the benchmark must see edge only as a binary", dep)
		}
	}
}

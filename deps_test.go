package edge_test

import (
	"go/parser"
	"go/token"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/edgelb/edge"

// TestImportRules keeps the package picture of docs/ARCHITECTURE.md true:
// dependencies point toward pure logic, only cmd/edge/internal/metrics (and
// cmd/edge, which wires it) knows Prometheus, and only cmd/edge knows the
// config schema and the TLS terminator.
func TestImportRules(t *testing.T) {
	for _, r := range importRules {
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
				ours := strings.HasPrefix(dep, module+"/")
				if ours && !allowed[dep] && (!r.anyOurs || testSupport[strings.TrimPrefix(dep, module+"/")]) {
					t.Errorf("%s imports %s; allowed of ours: %v", r.pkg, dep, r.ours)
				}
				if strings.HasPrefix(dep, "github.com/prometheus/") && !r.prometheus {
					t.Errorf("%s reaches %s: only cmd/edge/internal/metrics and cmd/edge may know Prometheus", r.pkg, dep)
				}
				if r.noStdNet && dep == "net/http" {
					t.Errorf("%s reaches net/http: it must stay pure logic", r.pkg)
				}
				if r.noNet && dep == "net" {
					t.Errorf("%s reaches net: it must do no I/O", r.pkg)
				}
			}
			if r.external != nil {
				checkExternal(t, r.pkg, r.external)
			}
		})
	}
}

// importRule is what one package may import.
type importRule struct {
	pkg      string
	ours     []string // packages of ours it may import
	noStdNet bool     // forbid net/http (pure logic)
	noNet    bool     // forbid the net package itself (no I/O at all)
	// external, when set, lists the only import-path prefixes outside
	// the standard library and our module that it may reach.
	external []string
	// anyOurs lets a binary import any package of ours but the test
	// support (testSupport); prometheus lets it reach the Prometheus
	// client (cmd/edge/internal/metrics, where edge meets it, and cmd/edge).
	anyOurs, prometheus bool
}

// testSupport are the packages of ours only tests and test programs may
// import.
var testSupport = map[string]bool{
	"internal/testkit": true, "internal/testbackend": true,
	"internal/consultest": true, "internal/interop": true,
}

// importRules has one rule for every package of the module:
// TestEveryPackageHasARule fails for a package without one, so a new
// package states what it may import when it is added.
var importRules = []importRule{
	{pkg: "balance", noStdNet: true},
	{pkg: "internal/hostname", noStdNet: true},
	{pkg: "conf", ours: []string{"internal/hostname", "internal/trust"}},
	{pkg: "tls", ours: []string{"internal/trust"}},
	// Whether a file is edge's: the file system and nothing else.
	{pkg: "internal/trust", noStdNet: true, noNet: true, external: []string{}},
	// The record layer is pure: stdlib crypto and x/crypto (whose
	// chacha20 reaches x/sys/cpu) only.
	{pkg: "tls/record", noStdNet: true, noNet: true, external: []string{"golang.org/x/crypto/", "golang.org/x/sys/cpu"}},
	// Tokens: JWS/JWT verification, JWK Sets and their sources, marks and
	// revocations; the standard library alone.
	{pkg: "auth", external: []string{}},
	{pkg: "proxy", ours: []string{"auth", "balance", "internal/hostname", "internal/wswire", "proxy/internal/wsession", "proxy/internal/handoff", "proxy/internal/ready", "tls/record"}},
	{pkg: "proxy/internal/handoff"},
	// The readiness runtime: sockets, pollers, the sweeper and the
	// client's record layer; nothing of HTTP, the proxy or metrics.
	{pkg: "proxy/internal/ready", ours: []string{"tls/record"}, noStdNet: true},
	// The session is pure policy: no I/O, no clock of its own.
	{pkg: "proxy/internal/wsession", ours: []string{"internal/wswire"}, noStdNet: true, noNet: true},
	{pkg: "discovery", ours: []string{"balance", "internal/consul", "internal/hostname", "internal/trust"}},
	// The fleet: Consul KV through the shared mechanics, the pools it
	// sets shares and actions on; nothing of the registry, HTTP front or file.
	{pkg: "fleet", ours: []string{"auth", "balance", "internal/consul", "internal/trust"}},
	// Consul mechanics the registry and the fleet share: the bounded
	// client, blocking-query index, backoff, bounded KV reads, state files.
	{pkg: "internal/consul", ours: []string{"internal/trust"}},
	{pkg: "health", ours: []string{"balance", "internal/wswire"}},
	{pkg: "internal/wswire", noStdNet: true},
	{pkg: "internal/testkit", ours: []string{"internal/wswire"}},
	// The admin listener knows the pools, not the proxy, the file or
	// the metrics library: cmd/edge passes those in.
	{pkg: "cmd/edge/internal/admin", ours: []string{"balance", "internal/hostname", "internal/trust"}},
	// Binding sockets and the descriptor budget: system calls only.
	{pkg: "cmd/edge/internal/sockets", noStdNet: true, external: []string{"golang.org/x/sys/"}},
	// GC pacing reads the runtime and touches nothing else.
	{pkg: "cmd/edge/internal/gcpace", noStdNet: true, noNet: true, external: []string{}},
	// The collectors implement the core packages' Observers and read
	// their status types; nothing of cmd/edge, the file or the admin.
	// The service manager's datagrams: a socket, the clock, nothing more.
	{pkg: "cmd/edge/internal/sdnotify", noStdNet: true, external: []string{"golang.org/x/sys/"}},
	{pkg: "cmd/edge/internal/metrics", prometheus: true, ours: []string{"auth", "balance", "discovery", "fleet", "health", "proxy", "tls",
		"internal/consul", "internal/hostname", "internal/trust", "internal/wswire", "proxy/internal/handoff", "proxy/internal/ready", "proxy/internal/wsession", "tls/record"}},
	// The process upgrade: exec, pipes and descriptors; nothing of
	// HTTP, the proxy, the file or metrics (cmd/edge counts).
	{pkg: "cmd/edge/internal/upgrade", noStdNet: true},
	// The running pools of the file and what a reload keeps: the file's
	// pools mapped onto the components' options; nothing of metrics.
	{pkg: "cmd/edge/internal/poolset", ours: []string{"auth", "balance", "conf", "fleet", "health", "proxy",
		"internal/consul", "internal/hostname", "internal/trust", "internal/wswire", "proxy/internal/handoff", "proxy/internal/ready", "proxy/internal/wsession", "tls/record"}},
	// The token component: the file's providers and their key sources,
	// each pool's policy for the proxy, the revocations in force.
	{pkg: "cmd/edge/internal/tokens", ours: []string{"auth", "balance", "cmd/edge/internal/admin", "conf", "proxy",
		"internal/hostname", "internal/trust", "internal/wswire", "proxy/internal/handoff", "proxy/internal/ready", "proxy/internal/wsession", "tls/record"}},
	// Rebalancing live connections and canaries: the pools' policy
	// ticked, the proxy's closes asked through its host, the operator's
	// endpoints; nothing of the file or Consul (the fleet's store is its
	// Store).
	{pkg: "cmd/edge/internal/rebalance", ours: []string{"balance", "cmd/edge/internal/admin", "internal/hostname", "internal/trust"}},
	// The binary wires everything (and builds the metrics registry); the
	// others are small programs and test support.
	{pkg: "cmd/edge", anyOurs: true, prometheus: true},
	{pkg: "cmd/edge-backend", ours: []string{"internal/testbackend"}},
	{pkg: "cmd/wsclient"},
	{pkg: "internal/testbackend"},
	{pkg: "internal/consultest"},
	{pkg: "internal/interop"},
	// The module root holds only these repository-wide tests.
	{pkg: "."},
}

// TestEveryPackageHasARule keeps importRules complete: a package added
// without a rule fails here until it states what it may import.
func TestEveryPackageHasARule(t *testing.T) {
	out, err := exec.Command("go", "list", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, out)
	}
	ruled := map[string]bool{}
	for _, r := range importRules {
		ruled[r.pkg] = true
	}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel == "" {
			rel = "."
		}
		if !ruled[rel] {
			t.Errorf("%s has no rule in importRules (deps_test.go): add one saying which packages of ours it may import", rel)
		}
	}
}

// TestPureFiles keeps the pure parts of packages that also do I/O pure:
// the hand-off's state record and the readiness runtime's runner state,
// sweeper and its schedule import no network package and no metrics library, so they
// stay testable without sockets and free of policy.
func TestPureFiles(t *testing.T) {
	for _, f := range []string{
		"proxy/internal/handoff/state.go",
		"proxy/internal/ready/runtime_linux.go",
		"proxy/internal/ready/sched.go",
		"proxy/internal/ready/conn_linux.go",
		"proxy/internal/ready/freeze_linux.go",
	} {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, imp := range file.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "net" || strings.HasPrefix(p, "net/") && p != "net/netip" || strings.HasPrefix(p, "github.com/prometheus/") {
				t.Errorf("%s imports %s: it must stay pure (no network, no metrics)", f, p)
			}
		}
	}
}

// TestTestkitOnlyInTests keeps internal/testkit out of the product: it
// calls testing's Fatal, so only _test.go files may import it.
func TestTestkitOnlyInTests(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			if imp == module+"/internal/testkit" {
				t.Errorf("%s imports internal/testkit outside its _test.go files", pkg)
			}
		}
	}
}

// checkExternal fails for every package pkg reaches outside the standard
// library and our module whose path has none of the allowed prefixes.
func checkExternal(t *testing.T, pkg string, allowed []string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./"+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./%s: %v\n%s", pkg, err, out)
	}
next:
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module+"/") {
			continue
		}
		for _, a := range allowed {
			if strings.HasPrefix(dep, a) {
				continue next
			}
		}
		t.Errorf("%s reaches %s; allowed outside the standard library: %v", pkg, dep, allowed)
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

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// registrySetup writes a config with static pools for the file's routes
// and the Consul agent (edge is not started). routes is the YAML list of the
// file's routes over pools named after the backends' IDs; policy goes
// under consul.routes.
func registrySetup(t *testing.T, agent *consultest.Agent, files []*testbackend.Server, routes, policy string) *setup {
	t.Helper()
	s := &setup{dir: t.TempDir(), wss: testkit.ClosedPort(t), ws: testkit.ClosedPort(t), admin: testkit.ClosedPort(t)}
	s.cfg = filepath.Join(s.dir, "edge.yaml")
	s.writeRegistry(t, agent, files, routes, policy)
	return s
}

func (s *setup) writeRegistry(t *testing.T, agent *consultest.Agent, files []*testbackend.Server, routes, policy string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "admin: {address: %q}\ndrain: {window: 0s, timeout: 5s}\n", s.admin)
	fmt.Fprintf(&b, "listeners:\n  - {name: ws, address: %q}\n", s.ws)
	fmt.Fprintf(&b, "routes:\n%s\npools:\n", routes)
	for _, f := range files {
		fmt.Fprintf(&b, "  - {name: %s, backends: [{id: %s, address: %q}]}\n", f.ID, f.ID, f.Addr())
	}
	fmt.Fprintf(&b, "consul:\n  address: %q\n  routes: %s\n", agent.Addr, policy)
	writeFile(t, s.cfg, b.String())
}

// whoami dials host and path on the plain listener and returns the
// backend's answer, or the dial error.
func (s *setup) whoami(t *testing.T, host, path string) string {
	t.Helper()
	h := http.Header{}
	h.Set("Host", host)
	c, resp, err := s.dialer().Dial("ws://"+s.ws+path, h)
	if err != nil {
		if resp != nil {
			return fmt.Sprintf("HTTP %d", resp.StatusCode)
		}
		return err.Error()
	}
	defer c.Close()
	return testkit.Ask(t, c, "whoami")
}

// refusedRoutes returns the services /status lists as refused declared
// routes, with their reasons.
func (s *setup) refusedRoutes(t *testing.T) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Discovery struct {
			Refused []struct{ Service, Reason string } `json:"refused_routes"`
		} `json:"discovery"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/status: %v", err)
	}
	out := map[string]string{}
	for _, r := range st.Discovery.Refused {
		out[r.Service] = r.Reason
	}
	return out
}

// route is one request and the backend that must answer it.
type route struct{ host, path, want string }

// awaitRefused polls until /status lists every service in refused while
// each route in keep is answered by its backend. A route answered by
// another backend fails at once: that is a declaration taking what it must
// not.
func (s *setup) awaitRefused(t *testing.T, refused []string, keep []route) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, r := range keep {
			if got := s.whoami(t, r.host, r.path); got != r.want && !strings.HasPrefix(got, "HTTP ") {
				t.Fatalf("%s%s answered by %q, want %q (the file's route)", r.host, r.path, got, r.want)
			}
		}
		got := s.refusedRoutes(t)
		missing := ""
		for _, svc := range refused {
			if _, ok := got[svc]; !ok {
				missing = svc
			}
		}
		if missing == "" {
			for _, r := range keep {
				if got := s.whoami(t, r.host, r.path); got != r.want {
					t.Fatalf("%s%s answered by %q, want %q", r.host, r.path, got, r.want)
				}
			}
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status never listed %q as refused; refused: %v", missing, got)
		}
		time.Sleep(50 * time.Millisecond) // polling the edge's view from outside; there is no event to await
	}
}

// TestRegistryCannotTakeFileRoutes: a service in Consul cannot take a
// sub-path of a host the file routes, a host under a wildcard of the file,
// the default route (by declaring no host), or a host outside
// consul.routes.allowed_hosts; each refusal is in /status. A declaration
// inside the allowed hosts still gets its route.
func TestRegistryCannotTakeFileRoutes(t *testing.T) {
	agent := consultest.Start(t)
	files := backends(t, "filechat", "filecorp", "fallback")
	decl := backends(t, "sub", "exact", "root", "outside", "ok")
	s := registrySetup(t, agent, files, `  - {hosts: [chat.example.com], pool: filechat}
  - {hosts: ["*.corp.test"], pool: filecorp}
  - {default: true, pool: fallback}`, `{allowed_hosts: ["*.example.com", "*.corp.test", "*.apps.test"]}`)
	p := startEdge(t, s.cfg)

	registerBackend(t, agent.Client, "sub", decl[0], "edge.host=chat.example.com", "edge.path=/api")
	registerBackend(t, agent.Client, "exact", decl[1], "edge.host=x.corp.test")
	registerBackend(t, agent.Client, "root", decl[2], "edge.path=/")
	registerBackend(t, agent.Client, "outside", decl[3], "edge.host=outside.example.net")
	registerBackend(t, agent.Client, "ok", decl[4], "edge.host=ok.apps.test")
	s.waitFor(t, "ok.apps.test", func(id string) bool { return id == "ok" }, "the route declared inside allowed_hosts")

	keep := []route{
		{"chat.example.com", "/api", "filechat"},
		{"CHAT.example.com.", "/api/v1", "filechat"},
		{"x.corp.test", "/", "filecorp"},
		{"elsewhere.test", "/", "fallback"},
		{"outside.example.net", "/", "fallback"},
	}
	reasons := s.awaitRefused(t, []string{"sub", "exact", "root", "outside"}, keep)
	for svc, want := range map[string]string{
		"sub":     "routed by the file",
		"exact":   "routed by the file",
		"root":    "allow_any_host is off",
		"outside": "not in consul.routes.allowed_hosts",
	} {
		if !strings.Contains(reasons[svc], want) {
			t.Errorf("%s refused for %q, want a reason containing %q", svc, reasons[svc], want)
		}
	}
	p.waitLog(t, `"msg":"declared route refused","service":"outside"`)
}

// TestRegistryConflictOlderRegistrationWins: two services declare the same
// host; the one registered first keeps it, even when the newcomer's name
// sorts first, on a running edge and on one that starts when both are
// already there. The loser is in /status and logged once, not on every
// registry change.
func TestRegistryConflictOlderRegistrationWins(t *testing.T) {
	agent := consultest.Start(t)
	files := backends(t, "fallback")
	decl := backends(t, "legit", "evil", "noise")
	routes := `  - {default: true, pool: fallback}`
	policy := `{allowed_hosts: ["*.apps.test"]}`
	s := registrySetup(t, agent, files, routes, policy)
	p := startEdge(t, s.cfg)

	registerBackend(t, agent.Client, "zzz-legit", decl[0], "edge.host=chat.apps.test")
	s.waitFor(t, "chat.apps.test", func(id string) bool { return id == "legit" }, "the first declaration of chat.apps.test")
	registerBackend(t, agent.Client, "aaa-evil", decl[1], "edge.host=chat.apps.test")
	reasons := s.awaitRefused(t, []string{"aaa-evil"}, []route{{"chat.apps.test", "/", "legit"}})
	if !strings.Contains(reasons["aaa-evil"], `"zzz-legit"`) {
		t.Errorf("aaa-evil refused for %q, want the owner zzz-legit named", reasons["aaa-evil"])
	}

	// More registry changes: the refusal stays, and is not logged again.
	registerBackend(t, agent.Client, "noise", decl[2], "edge.host=noise.apps.test")
	s.waitFor(t, "noise.apps.test", func(id string) bool { return id == "noise" }, "an unrelated declaration after the conflict")
	if got := s.whoami(t, "chat.apps.test", "/"); got != "legit" {
		t.Errorf("chat.apps.test after more registry changes: got %q, want legit", got)
	}
	if n := strings.Count(p.logs(), `"msg":"declared route refused","service":"aaa-evil"`); n != 1 {
		t.Errorf("the refusal of aaa-evil was logged %d times, want once", n)
	}

	// An edge that starts now sees both at once and holds nothing: the
	// catalog's registration order decides, not the names.
	fresh := registrySetup(t, agent, files, routes, policy)
	startEdge(t, fresh.cfg)
	fresh.waitFor(t, "noise.apps.test", func(id string) bool { return id == "noise" }, "the declarations on a fresh edge")
	fresh.awaitRefused(t, []string{"aaa-evil"}, []route{{"chat.apps.test", "/", "legit"}})
}

// TestRegistryConflictNeverBlocksReload: the file routes "chat.example.com."
// (trailing dot) and a service declares "chat.example.com", the same host
// once normalised. The declaration is refused; a SIGHUP with a changed file
// and a later registry change both still take effect.
func TestRegistryConflictNeverBlocksReload(t *testing.T) {
	agent := consultest.Start(t)
	files := backends(t, "filechat", "fallback", "filenew")
	decl := backends(t, "chat", "fresh")
	policy := `{allowed_hosts: ["*.example.com"]}`
	s := registrySetup(t, agent, files[:2], `  - {hosts: [chat.example.com.], pool: filechat}
  - {default: true, pool: fallback}`, policy)
	p := startEdge(t, s.cfg)

	registerBackend(t, agent.Client, "chat", decl[0], "edge.host=chat.example.com")
	s.awaitRefused(t, []string{"chat"}, []route{{"chat.example.com", "/", "filechat"}})

	s.writeRegistry(t, agent, files, `  - {hosts: [chat.example.com.], pool: filechat}
  - {hosts: [new.example.com], pool: filenew}
  - {default: true, pool: fallback}`, policy)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	if logs := p.logs(); strings.Contains(logs, "reload refused") {
		t.Fatalf("the reload was refused:\n%s", logs)
	}
	if got := s.whoami(t, "new.example.com", "/"); got != "filenew" {
		t.Errorf("new.example.com after the reload: got %q, want filenew", got)
	}

	registerBackend(t, agent.Client, "fresh", decl[1], "edge.host=fresh.example.com")
	s.waitFor(t, "fresh.example.com", func(id string) bool { return id == "fresh" }, "a registry change after the conflict")
	if got := s.whoami(t, "chat.example.com", "/"); got != "filechat" {
		t.Errorf("chat.example.com: got %q, want filechat", got)
	}
}

// registerTagged puts b into Consul under service with a TTL check that
// stays passing whatever b does: Consul's view then never takes b out, so
// only edge's own probe can.
func registerTagged(t *testing.T, c *api.Client, service string, b *testbackend.Server, tags ...string) {
	t.Helper()
	host, portStr, _ := net.SplitHostPort(b.Addr())
	port, _ := strconv.Atoi(portStr)
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: service + "-" + b.ID, Name: service, Address: host, Port: port, Tags: tags,
		Check: &api.AgentServiceCheck{TTL: "1h", Status: api.HealthPassing},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// declaredHealth returns, from /status, whether each backend of pool is
// healthy in edge's own view.
func (s *setup) declaredHealth(t *testing.T, pool string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Pools []struct {
			Name     string
			Backends []struct {
				ID      string `json:"id"`
				Healthy bool   `json:"healthy"`
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/status: %v", err)
	}
	out := map[string]bool{}
	for _, p := range st.Pools {
		if p.Name == pool {
			for _, b := range p.Backends {
				out[b.ID] = b.Healthy
			}
		}
	}
	return out
}

// TestRegistryPoolHasChecksAndLimits: a pool made for a service's declared
// route is built like a file pool from the file's defaults plus the
// declaration: edge's own health check (edge.health) takes out a backend
// Consul still calls passing, and the per-client cap
// (edge.max-conns-per-client-ip) refuses a third connection from one
// address.
func TestRegistryPoolHasChecksAndLimits(t *testing.T) {
	agent := consultest.Start(t)
	files := backends(t, "fallback")
	decl := backends(t, "chat-1", "chat-2")
	s := registrySetup(t, agent, files, `  - {default: true, pool: fallback}`, `{allowed_hosts: ["*.apps.test"]}`)
	startEdge(t, s.cfg)
	tags := []string{"edge.host=chat.apps.test", "edge.health=tcp", "edge.health-interval=200ms", "edge.max-conns-per-client-ip=2"}
	registerTagged(t, agent.Client, "chat", decl[0], tags...)
	registerTagged(t, agent.Client, "chat", decl[1], tags...)

	pool := declaredPoolName("chat")
	awaitHealth := func(want map[string]bool, what string) {
		t.Helper()
		testkit.Await(t, 20*time.Second, what, func() (bool, string) {
			got := s.declaredHealth(t, pool)
			return reflect.DeepEqual(got, want), fmt.Sprintf("%s backends %v, want %v", pool, got, want)
		})
	}
	awaitHealth(map[string]bool{"consultest/chat-chat-1": true, "consultest/chat-chat-2": true}, "both backends probed healthy")

	// Two connections from one address are admitted, the third is not.
	h := http.Header{}
	h.Set("Host", "chat.apps.test")
	for i := range 2 {
		c, _, err := s.dialer().Dial("ws://"+s.ws+"/", h)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		defer c.Close()
		if got := testkit.Ask(t, c, "whoami"); !strings.HasPrefix(got, "chat-") {
			t.Fatalf("connection %d answered by %q, want a chat backend", i+1, got)
		}
	}
	if _, resp, err := s.dialer().Dial("ws://"+s.ws+"/", h); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third connection from one address: %v %v, want 503 (max-conns-per-client-ip=2)", resp, err)
	}

	// Consul keeps chat-2 passing (TTL); edge's own tcp probe takes it out.
	decl[1].Close()
	awaitHealth(map[string]bool{"consultest/chat-chat-1": true, "consultest/chat-chat-2": false}, "edge's probe takes out the closed backend")
}

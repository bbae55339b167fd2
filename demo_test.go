package edge_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDemo runs the README's first command, scripts/demo.sh, as a newcomer
// would, with EDGE_DEMO_CHECK=1 so that it stops once edge has answered a
// WebSocket on both of its listeners instead of running until Ctrl-C. The
// demo refused to start once (a cookie secret written 0644, which edge
// rightly refuses) while still printing "edge is running"; this fails
// then. It needs the demo's fixed loopback ports (8443, 8080, 9901,
// 9001-9003, 18500, 18300-18302) and a Consul agent: scripts/test.sh
// builds one first, so the demo finds it in the cache.
//
// Consul's standard ports are held meanwhile, as on a machine that already
// runs an agent: the demo's own agent once failed there (Consul 1.15's dev
// mode binds gRPC-TLS on 8503 unless told not to) and the demo went on
// against no Consul at all.
func TestDemo(t *testing.T) {
	needConsul(t)
	for _, port := range []string{"8300", "8301", "8302", "8500", "8502", "8503", "8600"} {
		holdPort(t, port)
	}
	out, err := runDemo(t, nil)
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"edge is running", "stopping..."} {
		if !strings.Contains(out, want) {
			t.Errorf("scripts/demo.sh printed no %q:\n%s", want, out)
		}
	}
}

// TestDemoStopsOnATakenPort holds one of the demo's ports, backend-2's, and
// expects the demo to stop before starting anything, naming the port. The
// demo used to start regardless: backend-2 failed to listen, unnoticed, and
// edge ran with two backends of three.
func TestDemoStopsOnATakenPort(t *testing.T) {
	holdPort(t, "9002")
	out, err := runDemo(t, nil)
	if err == nil {
		t.Fatalf("scripts/demo.sh succeeded with port 9002 taken:\n%s", out)
	}
	if !strings.Contains(out, "port 9002, for backend-2, is already in use") {
		t.Errorf("scripts/demo.sh did not name the taken port 9002:\n%s", out)
	}
	for _, notWant := range []string{"edge is running", "building edge"} {
		if strings.Contains(out, notWant) {
			t.Errorf("scripts/demo.sh printed %q despite the taken port:\n%s", notWant, out)
		}
	}
}

// TestDemoStopsWhenConsulFails gives the demo a Consul agent that exits at
// once, as the real one did when a port of its own was taken, and expects
// the demo to stop with the agent's log instead of going on without it.
// The agent is found where scripts/consul.sh caches it, under
// XDG_CACHE_HOME, which this test points at a directory of its own (with
// Go's build cache kept where it is, so that the build stays warm).
func TestDemoStopsWhenConsulFails(t *testing.T) {
	needConsul(t)
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	cache := t.TempDir()
	fake := filepath.Join(cache, "edge", "consul-1.15.4", "consul")
	if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	const failure = "fake agent: listen tcp 127.0.0.1:18500: bind: address already in use"
	script := "#!/bin/sh\necho '" + failure + "' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := runDemo(t, []string{
		"XDG_CACHE_HOME=" + cache,
		"GOCACHE=" + strings.TrimSpace(string(gocache)),
	})
	if err == nil {
		t.Fatalf("scripts/demo.sh succeeded with a Consul agent that exits:\n%s", out)
	}
	for _, want := range []string{"the demo's Consul agent exited", failure} {
		if !strings.Contains(out, want) {
			t.Errorf("scripts/demo.sh printed no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "edge is running") {
		t.Errorf("scripts/demo.sh went on without its Consul agent:\n%s", out)
	}
}

// needConsul skips a test that runs the demo as far as its Consul agent
// when there is none to run.
func needConsul(t *testing.T) {
	t.Helper()
	if os.Getenv("EDGE_CONSUL_BIN") == "" {
		if os.Getenv("EDGE_REQUIRE_CONSUL") != "" {
			t.Fatal("EDGE_REQUIRE_CONSUL is set but EDGE_CONSUL_BIN is not")
		}
		t.Skip("no Consul agent (EDGE_CONSUL_BIN): scripts/test.sh builds one")
	}
}

// runDemo runs scripts/demo.sh with EDGE_DEMO_CHECK=1 and extra
// environment, within five minutes, and returns its combined output.
func runDemo(t *testing.T, env []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "scripts/demo.sh")
	cmd.Env = append(append(os.Environ(), "EDGE_DEMO_CHECK=1"), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// holdPort listens on 127.0.0.1:port until the test ends. A port that
// another program already holds is taken just the same, so that is no
// failure; any other error is.
func holdPort(t *testing.T, port string) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Logf("port %s is already in use on this machine", port)
		return
	}
	if err != nil {
		t.Fatalf("hold port %s: %v", port, err)
	}
	t.Cleanup(func() { ln.Close() })
}

package edge_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the README's first command, scripts/demo.sh, as a newcomer
// would, with EDGE_DEMO_CHECK=1 so that it stops once edge has answered a
// WebSocket on both of its listeners instead of running until Ctrl-C. The
// demo refused to start once (a cookie secret written 0644, which edge
// rightly refuses) while still printing "edge is running"; this fails
// then. It needs the demo's fixed loopback ports (8443, 8080, 9901, 18500)
// and a Consul agent: scripts/test.sh builds one first, so the demo finds
// it in the cache.
func TestDemo(t *testing.T) {
	if os.Getenv("EDGE_CONSUL_BIN") == "" {
		if os.Getenv("EDGE_REQUIRE_CONSUL") != "" {
			t.Fatal("EDGE_REQUIRE_CONSUL is set but EDGE_CONSUL_BIN is not")
		}
		t.Skip("no Consul agent (EDGE_CONSUL_BIN): scripts/test.sh builds one")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "scripts/demo.sh")
	cmd.Env = append(os.Environ(), "EDGE_DEMO_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"edge is running", "stopping..."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("scripts/demo.sh printed no %q:\n%s", want, out)
		}
	}
}

package consultest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// Version is the Consul release scripts/consul.sh builds.
const Version = "1.15.4"

// leaderWait bounds how long Start and Restart wait for the agent to elect
// itself; a dev agent on loopback normally needs about a second.
const leaderWait = 30 * time.Second

// Agent is one running dev-mode Consul agent.
type Agent struct {
	// Addr is the HTTP API address, host:port.
	Addr string
	// Client talks to Addr.
	Client *api.Client

	t       testing.TB
	bin     string
	dataDir string
	args    []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  *syncBuffer
}

// Bin returns the path of the Consul binary: EDGE_CONSUL_BIN, else the cache
// path of scripts/consul.sh. It does not check that the file exists.
func Bin() string {
	if p := os.Getenv("EDGE_CONSUL_BIN"); p != "" {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "edge", "consul-"+Version, "consul")
}

// Start runs a dev agent and waits until it has a leader. The agent is killed
// when the test ends.
func Start(t testing.TB) *Agent {
	t.Helper()
	bin := Bin()
	if _, err := os.Stat(bin); err != nil {
		// A bare `go test` on a machine without Consul skips these tests;
		// scripts/test.sh sets EDGE_REQUIRE_CONSUL=1, so there they fail.
		if os.Getenv("EDGE_REQUIRE_CONSUL") == "1" {
			t.Fatalf("consul binary %s: %v; build it with scripts/consul.sh (or set EDGE_CONSUL_BIN)", bin, err)
		}
		t.Skipf("consul binary %s: %v; build it with scripts/consul.sh (or set EDGE_CONSUL_BIN)", bin, err)
	}
	ports, err := freePorts(5)
	if err != nil {
		t.Fatalf("consultest: free ports: %v", err)
	}
	a := &Agent{
		Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		t:       t,
		bin:     bin,
		dataDir: t.TempDir(),
	}
	a.args = []string{"agent", "-dev",
		"-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-data-dir", a.dataDir, "-node", "consultest",
		"-log-level", "warn",
		"-http-port", strconv.Itoa(ports[0]),
		"-grpc-port", "-1", "-grpc-tls-port", "-1", "-dns-port", "-1",
		"-serf-lan-port", strconv.Itoa(ports[1]),
		"-serf-wan-port", strconv.Itoa(ports[2]),
		"-server-port", strconv.Itoa(ports[3]),
	}
	cfg := api.DefaultConfig()
	cfg.Address = a.Addr
	cfg.Token = ""
	cfg.TokenFile = ""
	a.Client, err = api.NewClient(cfg)
	if err != nil {
		t.Fatalf("consultest: client: %v", err)
	}
	t.Cleanup(a.Stop)
	a.start()
	return a
}

// Stop kills the agent and waits for it to exit. Safe to call twice.
func (a *Agent) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	<-a.done
	a.cmd = nil
}

// Restart stops the agent (if running) and starts it again on the same ports
// and data directory. The dev agent's Raft state is in memory, but the agent
// restores the services registered through it from the data directory, so
// they come back (with a new Raft index) as they would on a real agent.
func (a *Agent) Restart() {
	a.t.Helper()
	a.Stop()
	a.start()
}

// RestartEmpty restarts the agent with its data directory emptied: the
// catalog is empty and the Raft index starts low again, which is what a
// Consul that lost its state looks like to a blocking query.
func (a *Agent) RestartEmpty() {
	a.t.Helper()
	a.Stop()
	entries, err := os.ReadDir(a.dataDir)
	if err != nil {
		a.t.Fatalf("consultest: %v", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(a.dataDir, e.Name())); err != nil {
			a.t.Fatalf("consultest: %v", err)
		}
	}
	a.start()
}

func (a *Agent) start() {
	a.t.Helper()
	a.mu.Lock()
	cmd := exec.Command(a.bin, a.args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = agentProcAttr()
	if err := cmd.Start(); err != nil {
		a.mu.Unlock()
		a.t.Fatalf("consultest: start %s: %v", a.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // owned by Stop, which waits for it
	a.cmd, a.done, a.out = cmd, done, out
	a.mu.Unlock()

	deadline := time.Now().Add(leaderWait)
	for {
		leader, err := a.Client.Status().Leader()
		if err == nil && leader != "" && a.nodeRegistered() {
			return
		}
		select {
		case <-done:
			a.t.Fatalf("consultest: consul exited early; output:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("consultest: no leader after %v (last error %v); output:\n%s", leaderWait, err, out.String())
		}
		time.Sleep(50 * time.Millisecond) // polling an external process: there is no event to await
	}
}

// nodeRegistered reports whether the agent's own node is in the catalog
// yet: a leader comes first, and until the node's registration a session
// cannot be created ("Missing node registration").
func (a *Agent) nodeRegistered() bool {
	name, err := a.Client.Agent().NodeName()
	if err != nil {
		return false
	}
	node, _, err := a.Client.Catalog().Node(name, nil)
	return err == nil && node != nil && node.Node != nil
}

// freePorts returns n distinct loopback ports that were free for both TCP and
// UDP (Serf uses both) a moment ago. They come from below the kernel's
// ephemeral range (ip_local_port_range starts at 32768 by default), where
// a listen on port 0 never lands: a port a test took that way and let go
// of, to hand to a process, is never an agent's, nor is an agent's port
// taken while it restarts. Each port is handed out once per test binary.
func freePorts(n int) ([]int, error) {
	var ports []int
	var holds []func()
	defer func() {
		for _, h := range holds {
			h()
		}
	}()
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts > 1000 {
			return nil, errors.New("no free port pair found in 20000-29999")
		}
		port := 20000 + rand.IntN(10000)
		if !agentPorts.add(port) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			_ = l.Close()
			continue
		}
		holds = append(holds, func() { _ = l.Close(); _ = u.Close() })
		ports = append(ports, port)
	}
	return ports, nil
}

// agentPorts is every port freePorts considered in this process: agents
// of parallel tests never share one. Process-wide on purpose, since those
// tests know nothing of each other.
var agentPorts = portSet{seen: map[int]bool{}}

type portSet struct {
	mu   sync.Mutex
	seen map[int]bool
}

// add records port and reports whether it was new.
func (s *portSet) add(port int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[port] {
		return false
	}
	s.seen[port] = true
	return true
}

// syncBuffer collects the agent's output for failure messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

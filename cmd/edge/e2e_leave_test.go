package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/consul/api"
)

func adminGet(t *testing.T, admin, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// backendGauge returns the value of a per-backend series of pool app, and
// whether it is exported at all.
func backendGauge(metrics, name, backend string) (float64, bool) {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, `backend="`+backend+`"`) && strings.Contains(line, `pool="app"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// backendStates returns the state /status gives each backend of pool app
// (a backend listed twice, at two addresses, shows both states).
func backendStates(t *testing.T, admin string) map[string]string {
	t.Helper()
	var st struct {
		Pools []struct {
			Name     string `json:"name"`
			Backends []struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"backends"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, admin, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range st.Pools {
		if p.Name != "app" {
			continue
		}
		for _, b := range p.Backends {
			out[b.ID] += b.State
		}
	}
	return out
}

// heldConn is a client that records the close frame it receives and does
// not answer it until told to, so the edge keeps the connection (and must
// keep counting it) after sending its close.
type heldConn struct {
	*websocket.Conn
	code chan int
}

func dialHeld(t *testing.T, s *setup, wantBackend string) *heldConn {
	t.Helper()
	c, _, err := s.dialer().Dial("ws://"+s.ws+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if got := testkit.Ask(t, c, "whoami"); got != wantBackend {
		t.Fatalf("connection on %q, want %q", got, wantBackend)
	}
	h := &heldConn{Conn: c, code: make(chan int, 1)}
	c.SetCloseHandler(func(code int, _ string) error { h.code <- code; return nil })
	return h
}

// awaitClose reads until the close frame arrives and returns its code.
func (h *heldConn) awaitClose(t *testing.T) int {
	t.Helper()
	_ = h.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, _, err := h.ReadMessage(); err != nil {
			select {
			case code := <-h.code:
				return code
			default:
				t.Fatalf("connection ended without a close frame: %v", err)
			}
		}
	}
}

// nodeClients runs testdata/leave_clients.js: n Node `ws` connections to url.
type nodeClients struct {
	events chan map[string]any
	done   chan error
}

func startNodeClients(t *testing.T, url string, n int) *nodeClients {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd := interop.Node(t, ctx, filepath.Join("testdata", "leave_clients.js"), url, strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	nc := &nodeClients{events: make(chan map[string]any, 4*n+4), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				nc.events <- ev
			}
		}
		close(nc.events)
		nc.done <- cmd.Wait()
	}()
	return nc
}

// next returns the next event, failing the test if the script ended.
func (nc *nodeClients) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-nc.events:
		if !ok {
			t.Fatalf("node clients ended early: %v", <-nc.done)
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("node clients said nothing for 30 s")
	}
	return nil
}

func (s *setup) rewrite(t *testing.T, bs []*testbackend.Server, extra string) {
	t.Helper()
	s.write(t, bs, "least_conn", extra, filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem"))
}

func (p *proc) reloadAndWait(t *testing.T, logLine string) {
	t.Helper()
	n := strings.Count(p.logs(), logLine)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(p.logs(), logLine) == n {
		if time.Now().After(deadline) {
			t.Fatalf("log never showed another %q; log:\n%s", logLine, p.logs())
		}
		select {
		case <-p.seen:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestReloadRemovingBackendDrainsIt: six WebSockets live on b2 (three
// Node `ws` clients, three that hold their close reply); a SIGHUP whose
// file no longer names b2 sends every one of them close 1012 within the
// window, while the gauges keep counting those still open, as draining,
// until they close. b1's client is untouched.
func TestReloadRemovingBackendDrainsIt(t *testing.T) {
	bs := backends(t, "b1", "b2")
	leave := "    backend_leave: {connections: drain, window: 2s}\n"
	s := newSetup(t, bs[1:], "least_conn", leave)
	p := startEdge(t, s.cfg)

	node := startNodeClients(t, "ws://"+s.ws+"/", 3)
	for ev := node.next(t); ev["event"] != "ready"; ev = node.next(t) {
		if ev["event"] != "backend" || ev["id"] != "b2" {
			t.Fatalf("node client: %v, want it on b2", ev)
		}
	}
	var held []*heldConn
	for range 3 {
		held = append(held, dialHeld(t, s, "b2"))
	}
	if v, _ := backendGauge(adminGet(t, s.admin, "/metrics"), "edge_backend_active_connections", "b2"); v != 6 {
		t.Fatalf("b2 active connections: got %v, want 6", v)
	}

	s.rewrite(t, bs, leave)
	p.reloadAndWait(t, "configuration reloaded")
	other := dialHeld(t, s, "b1")

	s.rewrite(t, bs[:1], leave)
	p.reloadAndWait(t, "configuration reloaded")
	for closes := 0; closes < 3; {
		ev := node.next(t)
		if ev["event"] != "close" {
			continue
		}
		closes++
		if ev["code"] != float64(1012) {
			t.Errorf("node client %v: closed with %v, want 1012", ev["i"], ev["code"])
		}
	}
	if err := <-node.done; err != nil {
		t.Fatalf("node clients: %v", err)
	}
	for i, h := range held {
		if code := h.awaitClose(t); code != 1012 {
			t.Errorf("held client %d: close %d, want 1012", i, code)
		}
	}
	// The Node clients answered and are gone; the held ones are still
	// open on b2, which is no longer in the pool: they still count.
	testkit.Await(t, 20*time.Second, "b2 counting its 3 open connections as draining", func() (bool, string) {
		m := adminGet(t, s.admin, "/metrics")
		active, _ := backendGauge(m, "edge_backend_active_connections", "b2")
		draining, _ := backendGauge(m, "edge_backend_draining", "b2")
		st := backendStates(t, s.admin)["b2"]
		return active == 3 && draining == 1 && st == "draining", fmt.Sprintf("active %v draining %v state %q", active, draining, st)
	})
	for _, h := range held {
		_ = h.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1012, ""), time.Now().Add(5*time.Second))
	}
	testkit.Await(t, 20*time.Second, "b2 gone from the metrics once its connections closed", func() (bool, string) {
		m := adminGet(t, s.admin, "/metrics")
		_, there := backendGauge(m, "edge_backend_active_connections", "b2")
		return !there, fmt.Sprintf("b2 still exported; states %v", backendStates(t, s.admin))
	})
	if got := testkit.Ask(t, other.Conn, "still here"); got != "still here" {
		t.Errorf("b1's client after b2 left: got %q", got)
	}
}

// TestReloadRemovingBackendKeep: with backend_leave.connections keep, the
// clients of a removed backend stay, keep working and keep counting.
func TestReloadRemovingBackendKeep(t *testing.T) {
	bs := backends(t, "b1", "b2")
	leave := "    backend_leave: {connections: keep}\n"
	s := newSetup(t, bs[1:], "least_conn", leave)
	p := startEdge(t, s.cfg)
	var held []*heldConn
	for range 3 {
		held = append(held, dialHeld(t, s, "b2"))
	}
	s.rewrite(t, bs[:1], leave)
	p.reloadAndWait(t, "configuration reloaded")
	testkit.Await(t, 20*time.Second, "b2 shown as left with its 3 connections", func() (bool, string) {
		m := adminGet(t, s.admin, "/metrics")
		active, _ := backendGauge(m, "edge_backend_active_connections", "b2")
		draining, there := backendGauge(m, "edge_backend_draining", "b2")
		st := backendStates(t, s.admin)["b2"]
		return active == 3 && there && draining == 0 && st == "left", fmt.Sprintf("active %v draining %v state %q", active, draining, st)
	})
	for i, h := range held {
		if got := testkit.Ask(t, h.Conn, "still here"); got != "still here" {
			t.Errorf("client %d of the removed backend: got %q", i, got)
		}
	}
	if c := dialHeld(t, s, "b1"); c == nil {
		t.Fatal("no new connection")
	}
}

// consulLeaveSetup writes a config whose pool app follows the Consul
// service app, with no active checks of edge's own (Consul's word decides)
// and a short backend_leave window.
// startConsulLeaveEdge starts an edge on consulLeaveSetup's file and waits
// until its pool has the members instances registered.
func startConsulLeaveEdge(t *testing.T, agent *consultest.Agent, members int) *setup {
	t.Helper()
	s := consulLeaveSetup(t, agent)
	startEdge(t, s.cfg)
	testkit.Await(t, 20*time.Second, fmt.Sprintf("%d members", members), func() (bool, string) {
		st := backendStates(t, s.admin)
		return len(st) == members, fmt.Sprint(st)
	})
	return s
}

func consulLeaveSetup(t *testing.T, agent *consultest.Agent) *setup {
	t.Helper()
	s := &setup{dir: t.TempDir(), ws: testkit.ClosedPort(t), admin: testkit.ClosedPort(t)}
	s.cfg = filepath.Join(s.dir, "edge.yaml")
	writeFile(t, s.cfg, fmt.Sprintf(`admin: {address: %q}
drain: {window: 0s, timeout: 5s}
listeners: [{name: ws, address: %q}]
routes: [{default: true, pool: app}]
pools:
  - name: app
    consul: {service: app}
    backend_leave: {connections: drain, window: 1s}
consul: {address: %q}
`, s.admin, s.ws, agent.Addr))
	return s
}

// registerTTL registers b under service app with a TTL check the test
// sets itself, passing to begin with; it returns the check's ID.
func registerTTL(t *testing.T, c *api.Client, b *testbackend.Server) string {
	t.Helper()
	host, portStr, _ := net.SplitHostPort(b.Addr())
	port, _ := strconv.Atoi(portStr)
	id := "app-" + b.ID
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: "app", Address: host, Port: port,
		Check: &api.AgentServiceCheck{CheckID: "ttl-" + id, TTL: "1h", Status: api.HealthPassing},
	}); err != nil {
		t.Fatal(err)
	}
	return "ttl-" + id
}

// consulID is the member ID edge gives the instance registerTTL made for
// the backend: node/service-id.
func consulID(backend string) string { return "consultest/app-" + backend }

// spread dials until every backend in want holds at least n connections,
// and returns them by backend.
func (s *setup) spread(t *testing.T, n int, want ...string) map[string][]*heldConn {
	t.Helper()
	out := map[string][]*heldConn{}
	full := func() bool {
		for _, id := range want {
			if len(out[id]) < n {
				return false
			}
		}
		return true
	}
	for tries := 0; !full(); tries++ {
		if tries > 20*n*len(want) {
			t.Fatalf("connections never spread over %v: %v", want, out)
		}
		c, _, err := s.dialer().Dial("ws://"+s.ws+"/", nil)
		if err != nil {
			time.Sleep(50 * time.Millisecond) // the pool is still empty: discovery has not answered yet
			continue
		}
		t.Cleanup(func() { c.Close() })
		id := testkit.Ask(t, c, "whoami")
		out[id] = append(out[id], &heldConn{Conn: c, code: make(chan int, 1)})
	}
	return out
}

// closeCode reads until the connection ends and returns the close code it
// was sent.
func closeCode(t *testing.T, c *websocket.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if ce, ok := err.(*websocket.CloseError); ok {
			return ce.Code
		}
		if err != nil {
			t.Fatalf("connection ended without a close frame: %v", err)
		}
	}
}

// TestConsulBackendLeaveDrains: a deregistered instance and one put in
// maintenance have their clients sent close 1012; the remaining
// instance's clients stay.
func TestConsulBackendLeaveDrains(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "b3")
	for _, b := range bs {
		registerTTL(t, agent.Client, b)
	}
	s := startConsulLeaveEdge(t, agent, 3)
	on := s.spread(t, 2, "b1", "b2", "b3")

	// One at a time: two of three at once would trip the panic threshold.
	if err := agent.Client.Agent().ServiceDeregister("app-b2"); err != nil {
		t.Fatal(err)
	}
	for i, c := range on["b2"] {
		if code := closeCode(t, c.Conn); code != 1012 {
			t.Errorf("client %d of the deregistered b2: close %d, want 1012", i, code)
		}
	}
	if err := agent.Client.Agent().EnableServiceMaintenance("app-b3", "rolling restart"); err != nil {
		t.Fatal(err)
	}
	for i, c := range on["b3"] {
		if code := closeCode(t, c.Conn); code != 1012 {
			t.Errorf("client %d of b3 in maintenance: close %d, want 1012", i, code)
		}
	}
	for i, c := range on["b1"] {
		if got := testkit.Ask(t, c.Conn, "still here"); got != "still here" {
			t.Errorf("client %d of b1: got %q", i, got)
		}
	}
}

// TestConsulFailingCheckKeepsConnections: an instance whose check fails
// leaves the pool for new clients, but its live clients are not closed
// (checks flap); they keep counting. Once it is deregistered, they go.
func TestConsulFailingCheckKeepsConnections(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2")
	registerTTL(t, agent.Client, bs[0])
	check := registerTTL(t, agent.Client, bs[1])
	s := startConsulLeaveEdge(t, agent, 2)
	on := s.spread(t, 2, "b1", "b2")
	n := len(on["b2"])

	if err := agent.Client.Agent().UpdateTTL(check, "down", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, 20*time.Second, "b2 out of the pool with its connections kept", func() (bool, string) {
		active, _ := backendGauge(adminGet(t, s.admin, "/metrics"), "edge_backend_active_connections", consulID("b2"))
		st := backendStates(t, s.admin)[consulID("b2")]
		return st == "left" && active == float64(n), fmt.Sprintf("state %q active %v", st, active)
	})
	for i, c := range on["b2"] {
		if got := testkit.Ask(t, c.Conn, "still here"); got != "still here" {
			t.Errorf("client %d of b2 with a failing check: got %q", i, got)
		}
	}
	if err := agent.Client.Agent().ServiceDeregister("app-b2"); err != nil {
		t.Fatal(err)
	}
	for i, c := range on["b2"] {
		if code := closeCode(t, c.Conn); code != 1012 {
			t.Errorf("client %d of b2 once deregistered: close %d, want 1012", i, code)
		}
	}
}

// TestConsulPanicKeepsConnections: a registry that suddenly empties trips
// the panic threshold; the known members are held, and none of their
// clients is closed.
func TestConsulPanicKeepsConnections(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2")
	for _, b := range bs {
		registerTTL(t, agent.Client, b)
	}
	s := startConsulLeaveEdge(t, agent, 2)
	on := s.spread(t, 2, "b1", "b2")
	// A Consul that lost its state: every instance missing at once.
	agent.RestartEmpty()
	testkit.Await(t, 20*time.Second, "discovery in panic mode", func() (bool, string) {
		body := adminGet(t, s.admin, "/status")
		return strings.Contains(body, `"panic": true`), body
	})
	// The decision is made before the status shows the panic: had the
	// members been dropped, they would show as draining now.
	if st := backendStates(t, s.admin); st[consulID("b1")] != "member" || st[consulID("b2")] != "member" {
		t.Errorf("states under panic: got %v, want both members", st)
	}
	for id, cs := range on {
		for i, c := range cs {
			if got := testkit.Ask(t, c.Conn, "still here"); got != "still here" {
				t.Errorf("client %d of %s under panic: got %q", i, id, got)
			}
		}
	}
}

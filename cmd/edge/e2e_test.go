package main

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// edgeBin is the edge binary built once for these tests: they exercise the
// real process, its flags and its signals.
var edgeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "edge-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	edgeBin = filepath.Join(dir, "edge")
	// The commit the binary is built from, read just before the build: a
	// commit made while the tests run must not look like a wrong stamp.
	if rev, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		builtRevision = strings.TrimSpace(string(rev))
	}
	// Built by the script users run, so the tests see its version stamps.
	args := []string{"-race", "-o", edgeBin, "./cmd/edge"}
	if os.Getenv("EDGE_E2E_RACE") == "0" {
		// Measurements at scale (EDGE_REBALANCE_N): the race detector's
		// memory and time would be what they measure.
		args = args[1:]
	}
	out, err := exec.Command("../../scripts/build.sh", args...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build edge: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// writeCert writes a self-signed certificate for localhost and 127.0.0.1
// as cert.pem and key.pem in dir and returns the file names and a pool
// trusting it.
func writeCert(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	c := testkit.SelfSigned(t, "localhost", "127.0.0.1")
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testkit.WriteFile(t, certFile, c.CertPEM())
	testkit.WriteFile(t, keyFile, c.KeyPEM(t))
	return certFile, keyFile, c.Pool()
}

// proc is a running edge process whose log the test can wait on.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan error
	seen chan struct{} // signalled on every log line
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.log.Write(b)
	p.mu.Unlock()
	select {
	case p.seen <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits until the log contains s.
func (p *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(p.logs(), s) {
		select {
		case <-p.seen:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("log never showed %q; log:\n%s", s, p.logs())
		}
	}
}

func startEdge(t *testing.T, cfgFile string) *proc {
	t.Helper()
	return startEdgeEnv(t, cfgFile)
}

// startEdgeEnv starts edge with env added to the test's environment.
func startEdgeEnv(t *testing.T, cfgFile string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(edgeBin, "-config", cfgFile)
	cmd.Env = append(os.Environ(), env...)
	return startEdgeCmd(t, cmd)
}

// startEdgeCmd starts cmd, which runs edge (maybe through a shell that
// sets limits first), and waits until edge has started; the test's end
// kills it.
func startEdgeCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan error, 1), seen: make(chan struct{}, 1)}
	p.cmd.Stdout = p
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("edge log:\n%s", p.logs())
		}
	})
	p.waitLog(t, `"msg":"edge started"`)
	return p
}

func backends(t *testing.T, ids ...string) []*testbackend.Server {
	t.Helper()
	var out []*testbackend.Server
	for _, id := range ids {
		b, err := testbackend.Start(id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		out = append(out, b)
	}
	return out
}

type setup struct {
	dir, cfg, wss, ws, admin string
	roots                    *x509.CertPool
	// more are backends of other processes, written after the test's own.
	more []backendRef
}

// backendRef is a backend by its id and address.
type backendRef struct{ id, addr string }

// newSetup writes a config with a TLS and a plain listener in front of the
// given backends; extra is appended to the pool's YAML.
func newSetup(t *testing.T, bs []*testbackend.Server, balance, extra string) *setup {
	t.Helper()
	s := &setup{dir: t.TempDir(), wss: testkit.ClosedPort(t), ws: testkit.ClosedPort(t), admin: testkit.ClosedPort(t)}
	certFile, keyFile, roots := writeCert(t, s.dir)
	s.roots = roots
	s.cfg = filepath.Join(s.dir, "edge.yaml")
	s.write(t, bs, balance, extra, certFile, keyFile)
	return s
}

func (s *setup) write(t *testing.T, bs []*testbackend.Server, balance, extra, certFile, keyFile string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "admin: {address: %q}\n", s.admin)
	// Where edge generates the admin token the API's writes need.
	fmt.Fprintf(&b, "state_dir: %q\n", filepath.Join(s.dir, "state"))
	fmt.Fprintf(&b, "drain: {window: 1s, timeout: 10s}\n")
	fmt.Fprintf(&b, "listeners:\n  - name: wss\n    address: %q\n    tls:\n      certificates: [{cert_file: %q, key_file: %q}]\n", s.wss, certFile, keyFile)
	fmt.Fprintf(&b, "  - name: ws\n    address: %q\n", s.ws)
	fmt.Fprintf(&b, "routes:\n  - {default: true, pool: app}\npools:\n  - name: app\n    balance: %s\n    backends:\n", balance)
	for _, be := range bs {
		fmt.Fprintf(&b, "      - {id: %s, address: %q}\n", be.ID, be.Addr())
	}
	for _, be := range s.more {
		fmt.Fprintf(&b, "      - {id: %s, address: %q}\n", be.id, be.addr)
	}
	b.WriteString(extra)
	if err := os.WriteFile(s.cfg, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// token is the admin token edge generated in the setup's state_dir.
func (s *setup) token(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "state", "admin.token"))
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// dialer is a WebSocket client trusting the setup's certificate.
func (s *setup) dialer() *websocket.Dialer { return testkit.Dialer(s.roots, "") }

// builtRevision is the commit edgeBin was built from; "" outside a git
// checkout.
var builtRevision string

// checkoutRevision is the commit the tests' binary was built from, or ""
// outside a git checkout (then the binary cannot know it either).
func checkoutRevision(t *testing.T) string {
	t.Helper()
	if builtRevision == "" {
		t.Log("not a git checkout: the revision is not checked")
	}
	return builtRevision
}

// TestVersion: the binary built by scripts/build.sh names its version and
// the commit it was built from, not "dev".
func TestVersion(t *testing.T) {
	out, err := exec.Command(edgeBin, "-version").CombinedOutput()
	if err != nil {
		t.Fatalf("edge -version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "edge ") {
		t.Errorf("got %q, want it to start with %q", out, "edge ")
	}
	if rev := checkoutRevision(t); rev != "" {
		if want := "(revision " + rev + ", go"; !strings.Contains(string(out), want) {
			t.Errorf("got %q, want it to contain %q", out, want)
		}
		if strings.HasPrefix(string(out), "edge dev ") {
			t.Errorf("got %q, want the version from git describe", out)
		}
	}
}

// TestBuildInfoInStatusAndMetrics: /status and edge_build_info carry the
// same version and revision as -version.
func TestBuildInfoInStatusAndMetrics(t *testing.T) {
	rev := checkoutRevision(t)
	if rev == "" {
		rev = "unknown"
	}
	s := newSetup(t, backends(t, "b1"), "least_conn", "")
	startEdge(t, s.cfg)
	for path, want := range map[string]string{
		"/status":  `"revision": "` + rev + `"`,
		"/metrics": `edge_build_info{goversion="go`,
	} {
		resp, err := http.Get("http://" + s.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: got %d %q, want 200 containing %q", path, resp.StatusCode, trim(body), want)
		}
		if path == "/metrics" && !strings.Contains(string(body), `revision="`+rev+`",version="`) {
			t.Errorf("/metrics: edge_build_info lacks revision %q:\n%s", rev, grepLines(string(body), "edge_build_info"))
		}
		if path == "/status" && strings.Contains(string(body), `"version": "dev"`) {
			t.Errorf("/status: version is dev")
		}
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestCheckListsEveryProblemWithLines(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.yaml")
	body := "listeners:\n  - address: 127.0.0.1:1\n    bogus: 1\nroutes:\n  - {default: true, pool: nope}\npools:\n  - name: app\n    balance: roundrobin\n    backends: [{address: 127.0.0.1:2}]\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(edgeBin, "-check", "-config", cfg).CombinedOutput()
	if err == nil {
		t.Fatalf("edge -check accepted a bad file:\n%s", out)
	}
	for _, want := range []string{"bad.yaml:3", "bogus", "bad.yaml:5", "nope", "bad.yaml:8", "roundrobin"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("listeners: [{address: 127.0.0.1:1}]\nroutes: [{default: true, pool: app}]\npools: [{name: app, backends: [{address: 127.0.0.1:2}]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(edgeBin, "-check", "-config", good).CombinedOutput(); err != nil {
		t.Errorf("edge -check refused a good file: %v\n%s", err, out)
	}
}

// TestEchoStickinessAndHeaders is the newcomer's path: wss through the
// edge echoes, the cookie set on the 101 keeps a client on its backend, and
// the backend sees honest forwarded headers.
func TestEchoStickinessAndHeaders(t *testing.T) {
	bs := backends(t, "b1", "b2", "b3")
	s := newSetup(t, bs, "cookie", "")
	startEdge(t, s.cfg)
	d := s.dialer()
	c, resp, err := d.Dial("wss://"+s.wss+"/chat", http.Header{"X-Forwarded-For": {"6.6.6.6"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := testkit.Ask(t, c, "hello"); got != "hello" {
		t.Errorf("echo: got %q, want %q", got, "hello")
	}
	first := testkit.Ask(t, c, "whoami")
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "edge_sticky" {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.Secure || !cookie.HttpOnly {
		t.Fatalf("101 response cookie: got %+v, want edge_sticky Secure HttpOnly", cookie)
	}
	hdr := testkit.Ask(t, c, "headers")
	if strings.Contains(hdr, "6.6.6.6") {
		t.Errorf("a spoofed X-Forwarded-For from an untrusted client reached the backend: %s", hdr)
	}
	for _, want := range []string{`"X-Forwarded-For":["127.0.0.1"]`, `"X-Forwarded-Proto":["https"]`} {
		if !strings.Contains(hdr, want) {
			t.Errorf("backend headers lack %s: %s", want, hdr)
		}
	}
	for i := 0; i < 10; i++ {
		c2, _, err := d.Dial("wss://"+s.wss+"/chat", http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}})
		if err != nil {
			t.Fatal(err)
		}
		if got := testkit.Ask(t, c2, "whoami"); got != first {
			t.Errorf("reconnect %d with the cookie: got backend %q, want %q", i, got, first)
		}
		c2.Close()
	}
	// Every one of those TLS 1.3 WebSockets ran on edge's record layer
	// after its upgrade, none on crypto/tls.
	m := s.metricsText(t)
	if v, _ := metricValue(m, series("edge_tls_record_layer_total", `owner="edge"`)); v != 11 {
		t.Errorf("edge_tls_record_layer_total{owner=\"edge\"} = %v, want 11", v)
	}
	if v, ok := metricValue(m, series("edge_tls_record_layer_total", `owner="crypto_tls"`)); !ok || v != 0 {
		t.Errorf("edge_tls_record_layer_total{owner=\"crypto_tls\"} = %v (present %v), want 0", v, ok)
	}
}

// TestDrainOnSIGTERM: every WebSocket gets a close frame 1001 and the
// process exits 0 (traefik#3630: shutdown that forgets upgraded conns).
func TestDrainOnSIGTERM(t *testing.T) {
	bs := backends(t, "b1", "b2")
	s := newSetup(t, bs, "least_conn", "")
	p := startEdge(t, s.cfg)
	d := s.dialer()
	var conns []*websocket.Conn
	for i := 0; i < 6; i++ {
		c, _, err := d.Dial("wss://"+s.wss+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		testkit.Ask(t, c, "ping")
		conns = append(conns, c)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, _, err := c.ReadMessage()
		var ce *websocket.CloseError
		if !asCloseError(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Errorf("conn %d: got %v, want close 1001", i, err)
		}
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("edge exited with %v, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("edge did not exit after draining")
	}
}

func asCloseError(err error, ce **websocket.CloseError) bool {
	c, ok := err.(*websocket.CloseError)
	if ok {
		*ce = c
	}
	return ok
}

// TestReloadKeepsConnections: a reload changes the backends for new
// connections, leaves live WebSockets on the backends it keeps alone
// (traefik#6235, ingress-nginx#2461), and a broken file changes nothing.
// (What becomes of a removed backend's clients is backend_leave's: see
// TestReloadRemovingBackendDrainsIt and TestReloadRemovingBackendKeep.)
func TestReloadKeepsConnections(t *testing.T) {
	bs := backends(t, "old", "new")
	s := newSetup(t, bs[:1], "least_conn", "")
	p := startEdge(t, s.cfg)
	d := s.dialer()
	live, _, err := d.Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if got := testkit.Ask(t, live, "whoami"); got != "old" {
		t.Fatalf("got %q, want old", got)
	}
	certFile, keyFile := filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem")
	s.write(t, bs, "least_conn", "", certFile, keyFile) // least_conn: the idle new backend takes the next client
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	c, _, err := d.Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := testkit.Ask(t, c, "whoami"); got != "new" {
		t.Errorf("after reload: got %q, want new", got)
	}
	c.Close()
	if got := testkit.Ask(t, live, "still there"); got != "still there" {
		t.Errorf("live connection after reload: got %q", got)
	}

	if err := os.WriteFile(s.cfg, []byte("listeners: [{address: nonsense}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "reload refused")
	c, _, err = d.Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatalf("after a bad reload: %v", err)
	}
	if got := testkit.Ask(t, c, "whoami"); got != "new" {
		t.Errorf("after a bad reload: got %q, want new", got)
	}
	c.Close()
	if got := testkit.Ask(t, live, "and now"); got != "and now" {
		t.Errorf("live connection after bad reload: got %q", got)
	}
}

// TestAdminEndpoints: probes and metrics live on the admin listener only.
func TestAdminEndpoints(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	startEdge(t, s.cfg)
	c, _, err := s.dialer().Dial("ws://"+s.ws+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Ask(t, c, "x")
	c.Close()
	for path, want := range map[string]string{
		"/healthz": "ok",
		"/readyz":  "ready",
		"/metrics": `edge_backend_available{address="` + bs[0].Addr() + `",backend="b1",pool="app"} 1`,
		"/status":  `"id": "b1"`,
	} {
		resp, err := http.Get("http://" + s.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: got %d %q, want 200 containing %q", path, resp.StatusCode, trim(body), want)
		}
	}
	resp, err := http.Get("http://" + s.ws + "/metrics")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "edge_backend_available") {
			t.Errorf("metrics are served on the public listener")
		}
	}
}

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// TestPlainHTTPSharesStickiness: long-polling transports (socket.io,
// SockJS) poll over HTTP before upgrading and need the same backend.
func TestPlainHTTPSharesStickiness(t *testing.T) {
	bs := backends(t, "b1", "b2", "b3")
	s := newSetup(t, bs, "cookie", "")
	startEdge(t, s.cfg)
	resp, err := http.Get("http://" + s.ws + "/whoami")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "edge_sticky" {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatalf("plain HTTP response set no sticky cookie; headers %v", resp.Header)
	}
	c, _, err := s.dialer().Dial("ws://"+s.ws+"/", http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := testkit.Ask(t, c, "whoami"); got != string(body) {
		t.Errorf("upgrade after polling: got backend %q, want %q", got, body)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReadyzTurnsFirstDuringDrainDelay: on SIGTERM /readyz answers 503 at
// once while the listeners keep accepting for drain.delay, so whatever
// balances in front of edge stops sending clients before they are refused.
func TestReadyzTurnsFirstDuringDrainDelay(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	writeFile(t, s.cfg, strings.Replace(readFile(t, s.cfg), "drain: {window: 1s, timeout: 10s}", "drain: {delay: 3s, window: 0s, timeout: 10s}", 1))
	p := startEdge(t, s.cfg)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, `"msg":"draining"`)
	resp, err := http.Get("http://" + s.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: got %d, want 503", resp.StatusCode)
	}
	c, _, err := s.dialer().Dial("ws://"+s.ws+"/", nil)
	if err != nil {
		t.Fatalf("a client during drain.delay was refused: %v", err)
	}
	c.Close()
	if err := <-p.done; err != nil {
		t.Errorf("edge exited with %v, want 0", err)
	}
	p.done <- nil
}

// TestCookieKeyRotationOnReload: a new cookie secret with the old one as
// previous keeps every client on its backend and re-issues its cookie.
func TestCookieKeyRotationOnReload(t *testing.T) {
	bs := backends(t, "b1", "b2", "b3")
	dir := t.TempDir()
	oldKey, newKey := filepath.Join(dir, "old.key"), filepath.Join(dir, "new.key")
	writeFile(t, oldKey, "old-secret-0123456789abcdef")
	writeFile(t, newKey, "new-secret-0123456789abcdef")
	s := newSetup(t, bs, "cookie", fmt.Sprintf("    cookie: {secret_file: %q}\n", oldKey))
	p := startEdge(t, s.cfg)
	d := s.dialer()
	c, resp, err := d.Dial("ws://"+s.ws+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	first := testkit.Ask(t, c, "whoami")
	c.Close()
	var old *http.Cookie
	for _, ck := range resp.Cookies() {
		old = ck
	}
	if old == nil {
		t.Fatal("no cookie on the 101")
	}
	body := strings.Replace(readFile(t, s.cfg), fmt.Sprintf("    cookie: {secret_file: %q}\n", oldKey),
		fmt.Sprintf("    cookie: {secret_file: %q, previous_secret_file: %q}\n", newKey, oldKey), 1)
	writeFile(t, s.cfg, body)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	c, resp, err = d.Dial("ws://"+s.ws+"/", http.Header{"Cookie": {old.Name + "=" + old.Value}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := testkit.Ask(t, c, "whoami"); got != first {
		t.Errorf("with the previous key's cookie after rotation: got %q, want %q", got, first)
	}
	var reissued *http.Cookie
	for _, ck := range resp.Cookies() {
		reissued = ck
	}
	if reissued == nil || reissued.Value == old.Value {
		t.Errorf("cookie under the previous key was not re-issued: %+v", reissued)
	}
}

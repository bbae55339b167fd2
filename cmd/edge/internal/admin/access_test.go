package admin

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/edgelb/edge/balance"
)

const testToken = "test-token-0123456789abcdef"

// startServer runs a Server on loopback with a pool "app" of one backend
// "b1", pprof and a metrics listener, and returns it; the test's end
// stops it.
func startServer(t *testing.T, st Settings) *Server {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{
		Address: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0", Pprof: true,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "up 1\n") }),
		Status:  func() any { return map[string]any{"pid": 1} },
		Pools:   func() []*balance.Pool { return []*balance.Pool{p} }, Conns: noConns{},
		Settings: st,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// call sends one request to addr with the given Host (none: the address)
// and headers, and returns the status.
func call(t *testing.T, method, addr, path, host string, hdr map[string]string) int {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequest(method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestEveryEndpointRefusesAForeignHost: every endpoint of both listeners,
// reads included, answers a Host that is neither the listener's address,
// loopback, localhost nor an allowed name with 421 (a page rebinding its
// name onto 127.0.0.1 reads nothing), and answers it with the token.
func TestEveryEndpointRefusesAForeignHost(t *testing.T) {
	s := startServer(t, Settings{Enabled: true, Write: true, Token: testToken, AllowedHosts: CanonicalHosts([]string{"Edge-1.Internal.", "192.0.2.7"})})
	admin, metrics := s.Addr().String(), s.MetricsAddr().String()
	_, port, _ := net.SplitHostPort(admin)
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	type ep struct{ addr, path string }
	eps := []ep{
		{admin, "/healthz"}, {admin, "/readyz"}, {admin, "/metrics"}, {admin, "/status"}, {admin, "/"},
		{admin, "/api/v1/pools"}, {admin, "/api/v1/pools/app"}, {admin, "/api/v1/pools/app/backends/b1"},
		{admin, "/api/v1/pools/app/backends/b1/connections"}, {admin, "/debug/pprof/"},
		{metrics, "/metrics"}, {metrics, "/healthz"},
	}
	for _, e := range eps {
		for _, host := range []string{"attacker.example", "attacker.example:" + port, "127.0.0.1.attacker.example", "localhost.attacker.example", "10.0.0.1:" + port, "edge-1.internal.evil"} {
			if got := call(t, "GET", e.addr, e.path, host, nil); got != http.StatusMisdirectedRequest {
				t.Errorf("GET %s Host %q: got %d, want 421", e.path, host, got)
			}
		}
		for _, host := range []string{"", "localhost:" + port, "LOCALHOST.", "[::1]:" + port, "127.0.0.2", "edge-1.internal:" + port, "EDGE-1.internal", "192.0.2.7:" + port} {
			if got := call(t, "GET", e.addr, e.path, host, nil); got != http.StatusOK {
				t.Errorf("GET %s Host %q: got %d, want 200", e.path, host, got)
			}
		}
		if got := call(t, "GET", e.addr, e.path, "attacker.example", bearer); got != http.StatusOK {
			t.Errorf("GET %s foreign Host with the token: got %d, want 200", e.path, got)
		}
	}
	// Writes too: with the token only, foreign Host or not.
	const disable = "/api/v1/pools/app/backends/b1/disable"
	if got := call(t, "POST", admin, disable, "attacker.example", nil); got != http.StatusMisdirectedRequest {
		t.Errorf("POST foreign Host: got %d, want 421", got)
	}
	if got := call(t, "POST", admin, disable, "attacker.example", bearer); got != http.StatusOK {
		t.Errorf("POST foreign Host with the token: got %d, want 200", got)
	}
}

// TestHostAllowedByTheConnectionsAddress: on a listener bound to every
// address, the address the client reached is the listener's own (what a
// Prometheus finds in Consul's catalog); another one is not.
func TestHostAllowedByTheConnectionsAddress(t *testing.T) {
	local := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9901}
	for host, want := range map[string]bool{
		"10.1.2.3:9901": true, "10.1.2.3": true, "10.1.2.4:9901": false, "[::ffff:10.1.2.3]:9901": true,
		"": false, "[fe80::1%eth0]:9901": false,
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Host = host
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(local)))
		if got := hostAllowed(r, nil); got != want {
			t.Errorf("Host %q reaching %s: allowed %v, want %v", host, local, got, want)
		}
	}
}

// TestWritesNeedTheToken: a loopback listener without a token serves
// reads and refuses every write; with one, a write needs it.
func TestWritesNeedTheToken(t *testing.T) {
	const disable = "/api/v1/pools/app/backends/b1/disable"
	s := startServer(t, Settings{Enabled: true, Write: true})
	a := s.Addr().String()
	if got := call(t, "POST", a, disable, "", nil); got != http.StatusForbidden {
		t.Errorf("write on loopback, no token configured: got %d, want 403", got)
	}
	if got := call(t, "GET", a, "/api/v1/pools", "", nil); got != http.StatusOK {
		t.Errorf("read on loopback, no token configured: got %d, want 200", got)
	}
	s.SetSettings(Settings{Enabled: true, Write: true, Token: testToken})
	if got := call(t, "POST", a, disable, "", nil); got != http.StatusUnauthorized {
		t.Errorf("write without the token: got %d, want 401", got)
	}
	if got := call(t, "POST", a, disable, "", map[string]string{"Authorization": "Bearer " + testToken + "x"}); got != http.StatusUnauthorized {
		t.Errorf("write with a wrong token: got %d, want 401", got)
	}
	if got := call(t, "POST", a, disable, "", map[string]string{"Authorization": "Bearer " + testToken}); got != http.StatusOK {
		t.Errorf("write with the token: got %d, want 200", got)
	}
	if got := call(t, "GET", a, "/api/v1/pools", "", nil); got != http.StatusOK {
		t.Errorf("read without the token: got %d, want 200", got)
	}
}

// TestLoadOrCreateToken: the first call makes a 0600 file, later calls
// and concurrent first calls all return the one token, and a file others
// may read is refused with its name and mode.
func TestLoadOrCreateToken(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	toks := make([]string, 8)
	for i := range toks {
		wg.Go(func() {
			tok, err := LoadOrCreateToken(dir)
			if err != nil {
				t.Error(err)
			}
			toks[i] = tok
		})
	}
	wg.Wait()
	for _, tok := range toks[1:] {
		if tok != toks[0] || len(tok) != 64 {
			t.Fatalf("tokens %q: want one 64-hex-digit token", toks)
		}
	}
	path := filepath.Join(dir, TokenFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".admin.token-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateToken(dir); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "0644") {
		t.Errorf("token file of mode 0644: got %v, want a refusal naming the file and its mode", err)
	}
	if _, err := ReadToken(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadToken of a missing file: %v, want ErrNotExist", err)
	}
}

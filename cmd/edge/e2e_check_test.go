package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// checkConfig writes body (with the usual route and pool) as edge.yaml in
// dir and returns its path.
func checkConfig(t *testing.T, dir, backend, body string) string {
	t.Helper()
	cfg := filepath.Join(dir, "edge.yaml")
	writeFile(t, cfg, body+fmt.Sprintf("routes: [{default: true, pool: app}]\npools: [{name: app, backends: [{address: %q}]}]\n", backend))
	return cfg
}

// runCheck runs `edge -check` and returns its exit code and output.
func runCheck(t *testing.T, cfg string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, edgeBin, "-check", "-config", cfg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("edge -check: %v\n%s", err, out)
	}
	return 0, string(out)
}

// startupFails runs edge on cfg and returns its output once it has exited;
// a start ("edge started") is a failure of the test.
func startupFails(t *testing.T, cfg string) string {
	t.Helper()
	p := &proc{done: make(chan error, 1), seen: make(chan struct{}, 1)}
	p.cmd = exec.Command(edgeBin, "-config", cfg)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-p.done:
			if err == nil {
				t.Errorf("edge exited 0, want a failure:\n%s", p.logs())
			}
			return p.logs()
		case <-p.seen:
			if strings.Contains(p.logs(), "edge started") {
				_ = p.cmd.Process.Kill()
				<-p.done
				t.Errorf("edge started, want a refusal:\n%s", p.logs())
				return p.logs()
			}
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Fatalf("edge neither started nor exited:\n%s", p.logs())
		}
	}
}

// TestCheckRunsStartupChecks: every file here used to pass `edge -check`
// and then fail at start or misbehave. -check and startup now refuse each
// one, naming the file:line and the setting.
func TestCheckRunsStartupChecks(t *testing.T) {
	dir := t.TempDir()
	bs := backends(t, "b1")
	now := time.Now()
	goodCert, goodKey := testkit.SelfSignedWith(t, testkit.CertOptions{Hosts: []string{"good.example.com"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}).Write(t, dir, "good.example.com")
	expCert, expKey := testkit.SelfSignedWith(t, testkit.CertOptions{Hosts: []string{"expired.example.com"}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)}).Write(t, dir, "expired.example.com")
	port := strings.TrimPrefix(testkit.ClosedPort(t), "127.0.0.1:")
	tlsListener := func(addr, cert, key string) string {
		return fmt.Sprintf("  - name: wss\n    address: %q\n    tls:\n      certificates:\n        - cert_file: %q\n          key_file: %q\n", addr, cert, key)
	}
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"certificate and key swapped",
			fmt.Sprintf("admin: {address: %q}\nlisteners:\n", testkit.ClosedPort(t)) + tlsListener(testkit.ClosedPort(t), goodKey, goodCert),
			[]string{"edge.yaml:7: listeners[0].tls.certificates[0]", goodKey, "no CERTIFICATE"}},
		{"expired certificate",
			fmt.Sprintf("admin: {address: %q}\nlisteners:\n", testkit.ClosedPort(t)) + tlsListener(testkit.ClosedPort(t), expCert, expKey),
			[]string{"edge.yaml:7: listeners[0].tls.certificates[0]", expCert, "expired at", "no usable certificate"}},
		{"admin address equal to a listener's",
			fmt.Sprintf("admin: {address: %q}\nlisteners:\n", "127.0.0.1:"+port) + tlsListener("127.0.0.1:"+port, goodCert, goodKey),
			[]string{"edge.yaml:1: admin.address", "127.0.0.1:" + port, "listeners[0].address"}},
		{"TLS on 127.0.0.1 and plain on localhost, same port",
			fmt.Sprintf("admin: {address: %q}\nlisteners:\n", testkit.ClosedPort(t)) + tlsListener("127.0.0.1:"+port, goodCert, goodKey) +
				fmt.Sprintf("  - name: ws\n    address: %q\n", "localhost:"+port),
			[]string{"edge.yaml:10: listeners[1].address", "localhost:" + port, "127.0.0.1:" + port, "listeners[0].address"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			cfg := checkConfig(t, sub, bs[0].Addr(), tc.body)
			code, out := runCheck(t, cfg)
			if code == 0 {
				t.Errorf("edge -check exited 0:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, strings.ReplaceAll(w, "edge.yaml", cfg)) {
					t.Errorf("edge -check output lacks %q:\n%s", w, out)
				}
			}
			out = startupFails(t, cfg)
			if w := strings.ReplaceAll(tc.want[0], "edge.yaml", cfg); !strings.Contains(out, w) {
				t.Errorf("startup output lacks %q:\n%s", w, out)
			}
		})
	}
}

// TestExpiredCertificateServedAround: of two certificates, one expired,
// -check warns about the expired one and exits 0, edge starts and serves the
// good name to openssl, and /status and /metrics show the expired one.
func TestExpiredCertificateServedAround(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not on PATH")
	}
	dir := t.TempDir()
	bs := backends(t, "b1")
	now := time.Now()
	goodCert, goodKey := testkit.SelfSignedWith(t, testkit.CertOptions{Hosts: []string{"good.example.com"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}).Write(t, dir, "good.example.com")
	expCert, expKey := testkit.SelfSignedWith(t, testkit.CertOptions{Hosts: []string{"expired.example.com"}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)}).Write(t, dir, "expired.example.com")
	admin, wss := testkit.ClosedPort(t), testkit.ClosedPort(t)
	cfg := checkConfig(t, dir, bs[0].Addr(), fmt.Sprintf("admin: {address: %q}\nlisteners:\n  - name: wss\n    address: %q\n    tls:\n      certificates:\n"+
		"        - {cert_file: %q, key_file: %q}\n        - {cert_file: %q, key_file: %q}\n", admin, wss, expCert, expKey, goodCert, goodKey))

	code, out := runCheck(t, cfg)
	if code != 0 || !strings.Contains(out, "warning: "+cfg+":7: listeners[0].tls.certificates[0]") || !strings.Contains(out, "expired at") {
		t.Errorf("edge -check: exit %d, want 0 with a warning naming %s:7 and the expiry:\n%s", code, cfg, out)
	}

	startEdge(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", wss, "-servername", "good.example.com")
	cmd.Stdin = strings.NewReader("")
	sout, _ := cmd.CombinedOutput()
	if !strings.Contains(string(sout), "CN = good.example.com") || !strings.Contains(string(sout), "Cipher is") {
		t.Errorf("openssl s_client -servername good.example.com:\n%s", sout)
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	status := get("/status")
	if !strings.Contains(status, `"usable": false`) || !strings.Contains(status, "expired at") {
		t.Errorf("/status does not show the expired certificate unusable:\n%s", status)
	}
	metrics := get("/metrics")
	for _, w := range []string{
		fmt.Sprintf(`edge_tls_certificate_served{cert_file=%q,listener="wss"} 0`, expCert),
		fmt.Sprintf(`edge_tls_certificate_served{cert_file=%q,listener="wss"} 1`, goodCert),
	} {
		if !strings.Contains(metrics, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

// TestCheckRefusesOpenSecretFile: an admin token file readable by others
// (0644, as a plain `echo > file` leaves it) is refused by `edge -check`
// and at start, with the setting, the file and its mode; once chmod 600
// it passes.
func TestCheckRefusesOpenSecretFile(t *testing.T) {
	dir := t.TempDir()
	bs := backends(t, "b1")
	token := filepath.Join(dir, "admin.token")
	writeFile(t, token, "Xq3v9LmZ2pR7sT0wYb5nK8dF1gH4jC6e\n")
	if err := os.Chmod(token, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := checkConfig(t, dir, bs[0].Addr(), fmt.Sprintf("admin: {address: %q, api: {token_file: %q}}\nlisteners: [{name: ws, address: %q}]\n",
		testkit.ClosedPort(t), token, testkit.ClosedPort(t)))
	want := []string{cfg + ":1: admin.api.token_file", token, "mode 0644"}
	code, out := runCheck(t, cfg)
	if code == 0 {
		t.Errorf("edge -check exited 0:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("edge -check output lacks %q:\n%s", w, out)
		}
	}
	out = startupFails(t, cfg)
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("startup output lacks %q:\n%s", w, out)
		}
	}
	if err := os.Chmod(token, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runCheck(t, cfg); code != 0 {
		t.Errorf("edge -check with the token at 0600: exit %d\n%s", code, out)
	}
}

// TestPlantedStateDirRefused: another local user (uid 65534) made
// state_dir first and planted an admin.token in it, mode 0600 and their
// own content. Before, edge took that token (and with it whoever planted
// it drove the upgrade endpoint); now `edge -check` and startup refuse
// the directory, naming it and the owner, and a state_dir of edge's own
// passes.
func TestPlantedStateDirRefused(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(state, "admin.token")
	writeFile(t, token, "planted-by-another-user-0123456789abcdef\n")
	if err := os.Chmod(token, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{state, token} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Skipf("chown to uid 65534: %v (not root)", err)
		}
	}
	bs := backends(t, "b1")
	cfg := checkConfig(t, dir, bs[0].Addr(), fmt.Sprintf("state_dir: %q\nadmin: {address: %q, api: {enabled: true, write: true}}\nlisteners: [{name: ws, address: %q}]\n",
		state, testkit.ClosedPort(t), testkit.ClosedPort(t)))
	want := []string{"state_dir", state, "owned by uid 65534"}
	code, out := runCheck(t, cfg)
	if code == 0 {
		t.Errorf("edge -check exited 0:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("edge -check output lacks %q:\n%s", w, out)
		}
	}
	out = startupFails(t, cfg)
	for _, w := range want[1:] {
		if !strings.Contains(out, w) {
			t.Errorf("startup output lacks %q:\n%s", w, out)
		}
	}
	for _, p := range []string{state, token} {
		if err := os.Chown(p, os.Geteuid(), os.Getegid()); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := runCheck(t, cfg); code != 0 {
		t.Errorf("edge -check with state_dir edge's own: exit %d\n%s", code, out)
	}
}

// TestCheckNamesStateFilesNotEdges: in a state_dir of edge's, a saved set
// owned by another user (uid 65534) and a link in place of another are
// not read at start; `edge -check` says so for each, naming the file and
// why, and passes (startup serves without them). Edge's own saved set
// draws no word.
func TestCheckNamesStateFilesNotEdges(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	const set = `{"version": 1, "members": []}` + "\n"
	theirs := filepath.Join(state, "discovery-app.json")
	writeFile(t, theirs, set)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Skipf("chown to uid 65534: %v (not root)", err)
	}
	elsewhere := filepath.Join(dir, "set.json")
	writeFile(t, elsewhere, set)
	link := filepath.Join(state, "fleet-actions.json")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(state, "discovery-other.json")
	writeFile(t, mine, set)
	bs := backends(t, "b1")
	cfg := checkConfig(t, dir, bs[0].Addr(), fmt.Sprintf("state_dir: %q\nadmin: {address: %q}\nlisteners: [{name: ws, address: %q}]\n",
		state, testkit.ClosedPort(t), testkit.ClosedPort(t)))
	code, out := runCheck(t, cfg)
	if code != 0 {
		t.Errorf("edge -check: exit %d, want 0 (startup serves without these files):\n%s", code, out)
	}
	for _, w := range []string{theirs + ": not edge's: owned by uid 65534", link + ": not edge's: a symbolic link"} {
		if !strings.Contains(out, "warning: ") || !strings.Contains(out, w) {
			t.Errorf("edge -check output lacks a warning %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, mine) {
		t.Errorf("edge -check warns of edge's own file %s:\n%s", mine, out)
	}
}

// TestCheckTokenProviders: -check reads each provider's key file, asks
// its key server, and refuses a pool that would hand its token to a
// backend's access log; each problem is named with its place in the file.
func TestCheckTokenProviders(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(bad, []byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`listeners: [{name: ws, address: %q}]
auth:
  providers:
    - {name: local, issuer: "https://a.test", algorithms: [RS256], jwks_file: %q}
    - {name: remote, issuer: "https://b.test", algorithms: [ES256], jwks_url: "http://127.0.0.1:1/jwks"}
`, testkit.ClosedPort(t), bad)
	cfg := checkConfig(t, dir, "127.0.0.1:1", body)
	code, out := runCheck(t, cfg)
	if code == 0 || !strings.Contains(out, "auth.providers[0]") || !strings.Contains(out, "no usable key") {
		t.Errorf("a key file without a usable key: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "warning:") || !strings.Contains(out, "auth.providers[1]") {
		t.Errorf("a key server that does not answer is not warned about:\n%s", out)
	}

	leak := fmt.Sprintf(`listeners: [{name: ws, address: %q}]
auth:
  providers:
    - {name: remote, issuer: "https://b.test", algorithms: [ES256], jwks_url: "https://127.0.0.1:1/jwks"}
routes: [{default: true, pool: app}]
pools: [{name: app, backends: [{address: "127.0.0.1:1"}], auth: {mode: required, forward_token: true, from: [{query: access_token}]}}]
`, testkit.ClosedPort(t))
	writeFile(t, cfg, leak)
	if code, out := runCheck(t, cfg); code == 0 || !strings.Contains(out, "pools[0].auth.from[0].query") || !strings.Contains(out, "access log") {
		t.Errorf("forward_token with a query token: exit %d\n%s", code, out)
	}
}

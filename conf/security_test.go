package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgelb/edge/internal/testkit"
)

// TestAdminAddressMustBeLoopback: a non-loopback admin address without
// allow_public is refused at its line; with it, it loads with a warning.
func TestAdminAddressMustBeLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9901", ":9901", "192.0.2.1:9901", "[::]:9901", "admin.example.com:9901"} {
		errs := parseErrors(t, minimal+"admin:\n  address: \""+addr+"\"\n")
		got := errs.Error()
		if !strings.Contains(got, "edge.yaml:5: admin.address:") || !strings.Contains(got, "allow_public") {
			t.Errorf("%s: got %q, want an error at edge.yaml:5 naming allow_public", addr, got)
		}
	}
	for _, addr := range []string{"127.0.0.1:9901", "127.0.0.2:0", "[::1]:9901", "localhost:9901"} {
		if c := mustParse(t, minimal+"admin:\n  address: \""+addr+"\"\n"); len(c.Warnings()) != 0 {
			t.Errorf("%s: warnings %v", addr, c.Warnings())
		}
	}
	c := mustParse(t, minimal+"admin:\n  address: 0.0.0.0:9901\n  allow_public: true\n")
	if w := c.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0].Error(), "edge.yaml:5: admin.address:") {
		t.Errorf("allow_public: warnings %v, want one at edge.yaml:5", w)
	}
	if c.Admin.Pprof {
		t.Error("pprof is on by default")
	}
}

// TestWeakCookieSecretWarns: a key that passes the length check but
// repeats one byte loads with a warning at the line naming it.
func TestWeakCookieSecretWarns(t *testing.T) {
	dir := t.TempDir()
	weak := filepath.Join(dir, "weak")
	if err := os.WriteFile(weak, []byte(strings.Repeat("a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	strong := filepath.Join(dir, "strong")
	if err := os.WriteFile(strong, []byte("Xq3v9LmZ2pR7sT0wYb5nK8dF1gH4jC6e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_TEST_WEAK", "abababababababababab")
	src := `listeners: [{address: 127.0.0.1:8080}]
pools:
  - name: app
    balance: cookie
    backends: [{address: 127.0.0.1:9001}]
    cookie:
      secret_file: ` + weak + `
      previous_secret_env: EDGE_TEST_WEAK
  - name: ok
    balance: cookie
    backends: [{address: 127.0.0.1:9001}]
    cookie:
      secret_file: ` + strong + `
routes: [{default: true, pool: app}, {hosts: [a.example], pool: ok}]
`
	c := mustParse(t, src)
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.Error())
	}
	want := []string{
		"edge.yaml:7: pools[0].cookie.secret_file: weak key: about 0 bits",
		"edge.yaml:8: pools[0].cookie.previous_secret_env: weak key: about 20 bits",
	}
	if len(got) != len(want) {
		t.Fatalf("warnings\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d: got %q, want %q...", i, got[i], want[i])
		}
	}
}

func TestSecretBits(t *testing.T) {
	for key, want := range map[string]float64{
		"aaaaaaaaaaaaaaaa": 0,
		"abababababababab": 16,
		"0123456789abcdef": 64,
	} {
		if got := secretBits([]byte(key)); got != want {
			t.Errorf("secretBits(%q) = %g, want %g", key, got, want)
		}
	}
}

// TestStrictSNIHostNeedsTLS: the setting on a plain listener is ignored,
// and says so at its line.
func TestStrictSNIHostNeedsTLS(t *testing.T) {
	c := mustParse(t, "listeners: [{address: 127.0.0.1:8080,\n  strict_sni_host: true}]\npools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]\nroutes: [{default: true, pool: app}]\n")
	if w := c.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0].Error(), "edge.yaml:2: listeners[0].strict_sni_host: ignored") {
		t.Fatalf("warnings %v", w)
	}
}

// TestMaxConnectionsDerived: absent means derived, a written value (zero
// included) is kept.
func TestMaxConnectionsDerived(t *testing.T) {
	if !mustParse(t, minimal).MaxConnectionsDerived() {
		t.Error("absent limits.max_connections: not derived")
	}
	for _, v := range []string{"0", "100"} {
		if mustParse(t, minimal+"limits: {max_connections: "+v+"}\n").MaxConnectionsDerived() {
			t.Errorf("max_connections: %s: derived, want kept", v)
		}
	}
}

// TestSecretFileModes: every secret the file names (the admin token, the
// Consul token, cookie keys, session-ticket keys, certificate keys) is
// refused when its file is open to group or others, with the setting, the
// file and its mode; 0600 and 0400 load. ssh refuses private keys the
// same way.
func TestSecretFileModes(t *testing.T) {
	dir := t.TempDir()
	secret := "Xq3v9LmZ2pR7sT0wYb5nK8dF1gH4jC6e\n"
	ticket := "ZGVmYXVsdCB0aWNrZXQga2V5IG1hdGVyaWFsIDQ4IGJ5dGVzIGxvbmcgcGFkcGFkcGFk\n"
	cert := testkit.SelfSigned(t, "a.example")
	certFile, keyFile := cert.Write(t, dir, "a.example")
	for _, tc := range []struct {
		setting, content string
		config           func(path string) string
	}{
		{"admin.api.token_file", secret, func(p string) string {
			return minimal + "admin:\n  api:\n    token_file: " + p + "\n"
		}},
		{"consul.token_file", secret, func(p string) string {
			return minimal + "consul:\n  token_file: " + p + "\n"
		}},
		{"pools[0].cookie", secret, func(p string) string {
			return `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, balance: cookie, backends: [{address: 127.0.0.1:9001}], cookie: {secret_file: ` + p + `}}]
routes: [{default: true, pool: app}]
`
		}},
		{"pools[0].cookie", secret, func(p string) string {
			return `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, balance: cookie, backends: [{address: 127.0.0.1:9001}], cookie: {secret_env: EDGE_TEST_SECRET, previous_secret_file: ` + p + `}}]
routes: [{default: true, pool: app}]
`
		}},
		{"listeners[0].tls.session_tickets.key_file", ticket, func(p string) string {
			return `listeners: [{address: 127.0.0.1:8443, tls: {certificates: [{cert_file: ` + certFile + `, key_file: ` + keyFile + `}], session_tickets: {key_file: ` + p + `}}}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`
		}},
		{"listeners[0].tls.certificates[0].key_file", string(cert.KeyPEM(t)), func(p string) string {
			return `listeners: [{address: 127.0.0.1:8443, tls: {certificates: [{cert_file: ` + certFile + `, key_file: ` + p + `}]}}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`
		}},
	} {
		t.Setenv("EDGE_TEST_SECRET", secret)
		path := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644, 0o666} {
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			got := parseErrors(t, tc.config(path)).Error()
			want := fmt.Sprintf("%04o", mode)
			if !strings.Contains(got, tc.setting) || !strings.Contains(got, path) || !strings.Contains(got, want) {
				t.Errorf("%s at %s: got %q, want an error naming the setting, %s and its mode %s", tc.setting, want, got, path, want)
			}
		}
		for _, mode := range []os.FileMode{0o600, 0o400} {
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			mustParse(t, tc.config(path))
		}
	}
}

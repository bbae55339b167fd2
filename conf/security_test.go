package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

package conf

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const minimal = `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse("edge.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

// parseErrors parses src, which must fail, and returns the problems.
func parseErrors(t *testing.T, src string) *Errors {
	t.Helper()
	c, err := Parse("edge.yaml", []byte(src))
	if err == nil {
		t.Fatalf("Parse succeeded, want an error; config:\n%s", c)
	}
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want *Errors: %v", err, err)
	}
	if len(errs.List) == 0 {
		t.Fatal("*Errors with an empty list")
	}
	return errs
}

func TestMinimalDefaults(t *testing.T) {
	c := mustParse(t, minimal)
	l, p, r := c.Listeners[0], c.Pools[0], c.Routes[0]
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"admin.address", c.Admin.Address, "127.0.0.1:9901"},
		{"admin.api.enabled", c.Admin.API.Enabled, true},
		{"admin.api.write", c.Admin.API.Write, true},
		{"admin.api.token_file", c.Admin.API.TokenFile, ""},
		{"log.level", c.Log.Level, "info"},
		{"log.format", c.Log.Format, "json"},
		{"log.access_log", c.Log.AccessLog, true},
		{"drain.window", c.Drain.Window.Std(), 10 * time.Second},
		{"drain.timeout", c.Drain.Timeout.Std(), 30 * time.Second},
		{"upgrade.timeout", c.Upgrade.Timeout.Std(), 60 * time.Second},
		{"listener name", l.Name, "listener-0"},
		{"listener tls", l.TLS == nil, true},
		{"read_header_timeout", l.ReadHeaderTimeout.Std(), 10 * time.Second},
		{"tls_handshake_timeout", l.TLSHandshakeTimeout.Std(), 10 * time.Second},
		{"read_body_timeout", l.ReadBodyTimeout.Std(), 30 * time.Second},
		{"max_header_bytes", l.MaxHeaderBytes, 16384},
		{"proxy_protocol.timeout", l.ProxyProtocol.Timeout.Std(), 5 * time.Second},
		{"balance", p.Balance, BalanceLeastConn},
		{"backend id", p.Backends[0].ID, "127.0.0.1:9001"},
		{"backend weight", p.Backends[0].Weight, 1},
		{"cookie.name", p.Cookie.Name, "edge_sticky"},
		{"websocket.linger", p.WebSocket.Linger.Std(), 5 * time.Second},
		{"websocket.linger_bytes", p.WebSocket.LingerBytes, int64(16 << 20)},
		{"websocket.max_message_bytes (opaque pool)", p.WebSocket.MaxMessageBytes, int64(0)},
		{"cookie.path", p.Cookie.Path, "/"},
		{"cookie.same_site", p.Cookie.SameSite, SameSiteLax},
		{"client_ip.bounded_load", p.ClientIP.BoundedLoad, 1.25},
		{"client_ip.min_excess", p.ClientIP.MinExcess, int64(64)},
		{"timeouts.dial", p.Timeouts.Dial.Std(), 2 * time.Second},
		{"timeouts.handshake", p.Timeouts.Handshake.Std(), 10 * time.Second},
		{"timeouts.idle", p.Timeouts.Idle.Std(), time.Hour},
		{"timeouts.write", p.Timeouts.Write.Std(), 30 * time.Second},
		{"retries", p.Retries, 2},
		{"passive_ejection.failures", p.PassiveEjection.Failures, 5},
		{"passive_ejection.window", p.PassiveEjection.Window.Std(), 30 * time.Second},
		{"passive_ejection.cooldown", p.PassiveEjection.Cooldown.Std(), 30 * time.Second},
		{"passive_ejection.max_ejection_percent", p.PassiveEjection.MaxEjectionPercent, 50},
		{"max_response_header_bytes", p.MaxResponseHeaderBytes, 65536},
		{"health.type", p.Health.Type, HealthNone},
		{"health.interval", p.Health.Interval.Std(), 5 * time.Second},
		{"health.timeout", p.Health.Timeout.Std(), 2 * time.Second},
		{"health.rise", p.Health.Rise, 2},
		{"health.fall", p.Health.Fall, 3},
		{"health.path", p.Health.Path, "/"},
		{"health.expect_status", p.Health.ExpectStatus, 200},
		{"pool consul.passing_only", p.Consul.PassingOnly, true},
		{"backend_leave.connections", p.BackendLeave.Connections, LeaveDrain},
		{"backend_leave.window", p.BackendLeave.Window.Std(), 10 * time.Second},
		{"consul.register.service", c.Consul.Register.Service, "edge"},
		{"consul.register.metrics_service", c.Consul.Register.MetricsService, "edge-metrics"},
		{"consul.register.instance", c.Consul.Register.Instance, ""},
		{"metrics.address", c.Metrics.Address, ""},
		{"route default", r.Default, true},
		{"route path_prefix", r.PathPrefix, ""},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: got %v, want none", w)
	}
}

func TestTLSDefaults(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.pem", "a.key", "ca.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := "listeners: [{address: 127.0.0.1:8443, tls: {certificates: [{cert_file: a.pem, key_file: a.key, issuer_file: ca.pem}]}}]\n" +
		"pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]\n" +
		"routes: [{default: true, pool: app}]\n"
	path := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	tl := c.Listeners[0].TLS
	if got, want := tl.Certificates[0].CertFile, filepath.Join(dir, "a.pem"); got != want {
		t.Errorf("cert_file: got %q, want %q (relative to the config file)", got, want)
	}
	if got, want := tl.Certificates[0].IssuerFile, filepath.Join(dir, "ca.pem"); got != want {
		t.Errorf("issuer_file: got %q, want %q (relative to the config file)", got, want)
	}
	if got, want := tl.MinVersion, "1.2"; got != want {
		t.Errorf("min_version: got %q, want %q", got, want)
	}
	if got, want := tl.Version(), uint16(0x0303); got != want {
		t.Errorf("Version(): got %#x, want %#x", got, want)
	}
	st := tl.SessionTickets
	if !st.Enabled || st.RotateEvery.Std() != time.Hour || st.Keep != 3 {
		t.Errorf("session_tickets: got %+v, want enabled, 1h, keep 3", st)
	}
	if !tl.OCSP.Enabled || tl.OCSP.MustStaple != MustStapleRefuse {
		t.Errorf("ocsp: got %+v, want enabled, refuse", tl.OCSP)
	}
}

// Values written in the file, zero and false included, beat defaults.
func TestExplicitZeroKept(t *testing.T) {
	c := mustParse(t, minimalWith("log: {access_log: false}\ndrain: {window: 0}",
		"timeouts: {idle: 0}, retries: 0, passive_ejection: {failures: 0}, consul: {passing_only: false}, limits: {connection_rate_per_client_ip: 2.5, connection_rate: 7.2}"))
	p := c.Pools[0]
	if c.Log.AccessLog {
		t.Error("log.access_log: got true, want false")
	}
	if c.Drain.Window != 0 {
		t.Errorf("drain.window: got %v, want 0", c.Drain.Window)
	}
	if p.Timeouts.Idle != 0 {
		t.Errorf("timeouts.idle: got %v, want 0 (never)", p.Timeouts.Idle)
	}
	if p.Retries != 0 {
		t.Errorf("retries: got %d, want 0", p.Retries)
	}
	if p.PassiveEjection.Failures != 0 {
		t.Errorf("passive_ejection.failures: got %d, want 0", p.PassiveEjection.Failures)
	}
	if p.Consul.PassingOnly {
		t.Error("consul.passing_only: got true, want false")
	}
	if got, want := p.Limits.ConnectionBurstPerClientIP, 3; got != want {
		t.Errorf("connection_burst_per_client_ip: got %d, want %d (rate rounded up)", got, want)
	}
	if got, want := p.Limits.ConnectionBurst, 8; got != want {
		t.Errorf("pool connection burst default: got %d, want %d (the rate rounded up)", got, want)
	}
}

// minimalWith returns the minimal config with extra top-level lines
// appended and extra flow-mapping entries added to the pool.
func minimalWith(top, pool string) string {
	p := "pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]\n"
	if pool != "" {
		p = "pools: [{name: app, backends: [{address: 127.0.0.1:9001}], " + pool + "}]\n"
	}
	s := "listeners: [{address: 127.0.0.1:8080}]\n" + p + "routes: [{default: true, pool: app}]\n"
	if top != "" {
		s += top + "\n"
	}
	return s
}

func TestHostsCanonicalAndPrefixDefault(t *testing.T) {
	c := mustParse(t, `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{hosts: [Chat.Example.COM, "*.Example.com."], pool: app}]
`)
	r := c.Routes[0]
	if want := []string{"chat.example.com", "*.example.com"}; !slices.Equal(r.Hosts, want) {
		t.Errorf("hosts: got %q, want %q", r.Hosts, want)
	}
	if r.PathPrefix != "/" {
		t.Errorf("path_prefix: got %q, want \"/\"", r.PathPrefix)
	}
}

func TestFullExample(t *testing.T) {
	t.Setenv("EDGE_COOKIE_SECRET_PREVIOUS", "previous-secret-0123456789")
	t.Setenv(ConsulTokenEnv, "")
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := len(c.Listeners), 2; got != want {
		t.Fatalf("listeners: got %d, want %d", got, want)
	}
	l := c.Listeners[0]
	if got, want := l.TLS.Certificates[0].KeyFile, filepath.Join("testdata", "certs", "example.com.key"); got != want {
		t.Errorf("key_file: got %q, want %q", got, want)
	}
	if got, want := c.StateDir, filepath.Join("testdata", "state"); got != want {
		t.Errorf("state_dir: got %q, want %q", got, want)
	}
	wantProxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.10/32")}
	if !slices.Equal(l.TrustedProxies, wantProxies) {
		t.Errorf("trusted_proxies: got %v, want %v", l.TrustedProxies, wantProxies)
	}
	if got, want := c.Listeners[1].Name, "plain"; got != want {
		t.Errorf("listeners[1].name: got %q, want %q", got, want)
	}
	chat, api := c.Pools[0], c.Pools[1]
	if got, want := chat.Backends[1].Weight, 2; got != want {
		t.Errorf("chat backend weight: got %d, want %d", got, want)
	}
	if got, want := api.Consul.Service, "api"; got != want {
		t.Errorf("api consul.service: got %q, want %q", got, want)
	}
	if got, want := api.Health.Interval.Std(), 5*time.Second; got != want {
		t.Errorf("api health.interval: got %v, want %v", got, want)
	}
	cur, prev, err := chat.Cookie.Secrets()
	if err != nil {
		t.Fatalf("Secrets: %v", err)
	}
	if got, want := string(cur), "example-cookie-secret-for-tests-only"; got != want {
		t.Errorf("current secret: got %q, want %q (trimmed file content)", got, want)
	}
	if len(prev) != 1 || string(prev[0]) != "previous-secret-0123456789" {
		t.Errorf("previous secrets: got %q, want the environment variable's value", prev)
	}
	adm, err := c.Admin.API.Token()
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	if got, want := string(adm), "example-admin-token-for-tests"; got != want || !c.Admin.API.Enabled || !c.Admin.API.Write {
		t.Errorf("admin.api: token %q enabled %v write %v, want %q, true, true", got, c.Admin.API.Enabled, c.Admin.API.Write, want)
	}
	tok, err := c.Consul.ACLToken()
	if err != nil {
		t.Fatalf("ACLToken: %v", err)
	}
	if got, want := string(tok), "example-consul-token-for-tests"; got != want {
		t.Errorf("consul token: got %q, want %q", got, want)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: got %v, want none", w)
	}
}

// The effective configuration printed by String parses back to the same
// configuration, so no setting is lost in rendering.
func TestStringRoundTrip(t *testing.T) {
	t.Setenv("EDGE_COOKIE_SECRET_PREVIOUS", "")
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	out := c.String()
	c2, err := Parse("edge.yaml", []byte(out))
	if err != nil {
		t.Fatalf("Parse(String()): %v\n%s", err, out)
	}
	if got := c2.String(); got != out {
		t.Errorf("round trip differs:\ngot:\n%s\nwant:\n%s", got, out)
	}
}

// TestAdminTokenTooShortOrUnset: a weak or missing token is refused with
// the file or variable named and the content never shown.
func TestAdminTokenTooShortOrUnset(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.token")
	if err := os.WriteFile(short, []byte("tiny-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_TEST_ADMIN_TOKEN", "")
	for _, tc := range []struct {
		api  AdminAPI
		want string
	}{
		{AdminAPI{TokenFile: short}, "short.token: 11 bytes, need at least 16"},
		{AdminAPI{TokenEnv: "EDGE_TEST_ADMIN_TOKEN"}, "EDGE_TEST_ADMIN_TOKEN is unset or empty"},
	} {
		_, err := tc.api.Token()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "tiny") {
			t.Errorf("%+v: got %v, want an error containing %q and not the content", tc.api, err, tc.want)
		}
	}
}

func TestInvalid(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("tiny-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		src  string
		want []string // each must appear in the error text
	}{
		{"empty file", "", []string{`edge.yaml: listeners: at least one listener is required`}},
		{"comment only", "# nothing\n", []string{`edge.yaml: listeners: at least one listener is required`}},
		{"top level list", "- a\n- b\n", []string{`edge.yaml:1: expected a mapping, got a list`}},
		{"syntax", "listeners: [{address: 127.0.0.1:8080}\npools: x\n", []string{`edge.yaml:`, `YAML syntax:`}},
		{"tab indentation", "listeners:\n\t- address: x\n", []string{`edge.yaml:2: YAML syntax:`}},
		{"two documents", minimal + "---\nlog: {}\n", []string{`edge.yaml:4: more than one YAML document`}},
		{"unknown top-level key", minimalWith("listner: x", ""), []string{`edge.yaml:4: unknown key "listner" (did you mean "listeners"?)`}},
		{"unknown key camelCase", minimalWith("listeners2: x", "readTimeout: 1s"), []string{`edge.yaml:2: pools[0]: unknown key "readTimeout"`, `edge.yaml:4: unknown key "listeners2" (did you mean "listeners"?)`}},
		{"unknown key at depth", `listeners: [{address: 127.0.0.1:8080}]
pools:
  - name: app
    backends: [{address: 127.0.0.1:9001}]
    timeouts:
      dail: 2s
routes: [{default: true, pool: app}]
`, []string{`edge.yaml:6: pools[0].timeouts: unknown key "dail" (did you mean "dial"?)`}},
		{"zero read_body_timeout", `listeners: [{address: 127.0.0.1:8080, read_body_timeout: 0s}]` + "\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):],
			[]string{`edge.yaml:1: listeners[0].read_body_timeout: must be greater than 0`}},
		{"snake vs camel suggestion", `listeners: [{address: 127.0.0.1:8080, readHeaderTimeout: 1s}]` + "\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):],
			[]string{`edge.yaml:1: listeners[0]: unknown key "readHeaderTimeout" (did you mean "read_header_timeout"?)`}},
		{"admin token both ways", minimalWith("admin:\n  api: {token_file: nope.token, token_env: EDGE_ADMIN_TOKEN}", ""),
			[]string{`edge.yaml:5: admin.api.token_env: set only one of token_file and token_env`, `admin.api.token_file: `, `nope.token: no such file`}},
		{"admin allowed_hosts", minimalWith("admin:\n  allowed_hosts: [edge-1.internal, 192.0.2.7, \"*.internal\", \"edge-2.internal:9901\", \"\"]", ""),
			[]string{`admin.allowed_hosts[2]: "*.internal" is neither`, `admin.allowed_hosts[3]: "edge-2.internal:9901" is neither`, `admin.allowed_hosts[4]: "" is neither`}},
		{"duplicate key", minimalWith("log:\n  level: info\n  level: debug", ""), []string{`edge.yaml:6: log.level: duplicate key (first at line 5)`}},
		{"bool for string", minimalWith("log: {level: true}", ""), []string{`edge.yaml:4: log.level: expected a string, got a boolean`}},
		{"string for bool", minimalWith(`log: {access_log: "yes"}`, ""), []string{`edge.yaml:4: log.access_log: expected true or false, got a string`}},
		{"list for mapping", minimalWith("drain: [10s]", ""), []string{`edge.yaml:4: drain: expected a mapping, got a list`}},
		{"mapping for list", "listeners: [{address: 127.0.0.1:8080}]\npools: [{name: app, backends: {address: x}}]\nroutes: [{default: true, pool: app}]\n", []string{`edge.yaml:2: pools[0].backends: expected a list, got a mapping`}},
		{"string for int", minimalWith("limits: {max_connections: lots}", ""), []string{`edge.yaml:4: limits.max_connections: expected an integer, got a string`}},
		{"float for int", minimalWith("", "retries: 1.5"), []string{`edge.yaml:2: pools[0].retries: expected an integer, got a number`}},
		{"int out of range", minimalWith("limits: {max_connections: 99999999999999999999}", ""), []string{`edge.yaml:4: limits.max_connections: integer 99999999999999999999 is out of range`}},
		{"fleet scope without a fleet", minimalWith("", "limits: {max_connections_per_backend: 150, max_connections_per_backend_scope: fleet}"),
			[]string{`edge.yaml:2: pools[0].limits.max_connections_per_backend_scope: fleet needs consul.fleet.prefix`}},
		{"unknown limit scope", minimalWith("consul: {fleet: {prefix: edge/fleet}}", "limits: {connection_rate: 5, connection_rate_scope: global}"),
			[]string{`edge.yaml:2: pools[0].limits.connection_rate_scope: "global"`}},
		{"fleet bounds", minimalWith("consul: {fleet: {prefix: edge/fleet, id: a/b, publish_every: 1s, session_ttl: 5s, stale_after: 5s}}", ""),
			[]string{`edge.yaml:4: consul.fleet.id: "a/b"`, `edge.yaml:4: consul.fleet.publish_every: 1s: at least 2s`,
				`edge.yaml:4: consul.fleet.session_ttl: 5s: want 10s to 1h`, `edge.yaml:4: consul.fleet.stale_after: 5s: want more than 5s`}},
		{"duration without unit", minimalWith("drain: {window: 30}", ""), []string{`edge.yaml:4: drain.window: duration 30 has no unit`}},
		{"duration days", minimalWith("drain: {timeout: 1d}", ""), []string{`edge.yaml:4: drain.timeout: invalid duration "1d"`, `no day unit`}},
		{"negative duration", minimalWith("", "timeouts: {dial: -1s}"), []string{`edge.yaml:2: pools[0].timeouts.dial: -1s must not be negative`}},
		{"zero dial", minimalWith("", "timeouts: {dial: 0s}"), []string{`edge.yaml:2: pools[0].timeouts.dial: must be greater than 0`}},
		{"zero upgrade.timeout", minimalWith("upgrade: {timeout: 0s}", ""), []string{`edge.yaml:4: upgrade.timeout: must be greater than 0`}},
		{"max ejection percent", minimalWith("", "passive_ejection: {max_ejection_percent: 0}"), []string{`edge.yaml:2: pools[0].passive_ejection.max_ejection_percent: 0 is outside 1..100`}},
		{"max response header bytes", minimalWith("", "max_response_header_bytes: 100"), []string{`edge.yaml:2: pools[0].max_response_header_bytes: 100 is outside 1024..1048576`}},
		{"window past timeout", minimalWith("drain:\n  window: 1m", ""), []string{`edge.yaml:5: drain.window: 1m0s is longer than drain.timeout 30s`}},
		{"log level", minimalWith("log: {level: verbose}", ""), []string{`edge.yaml:4: log.level: "verbose" is not one of "debug", "info", "warn", "error"`}},
		{"log format suggestion", minimalWith("log: {format: jsno}", ""), []string{`log.format: "jsno" is not one of "json", "text" (did you mean "json"?)`}},
		{"no listeners", "pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]\nroutes: [{default: true, pool: app}]\n", []string{`edge.yaml: listeners: at least one listener is required`}},
		{"listener without port", "listeners: [{address: localhost}]\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):], []string{`edge.yaml:1: listeners[0].address: "localhost" is not host:port`}},
		{"listener without address", "listeners: [{name: a}]\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):], []string{`edge.yaml:1: listeners[0].address: required`}},
		{"listener bad port", "listeners: [{address: 127.0.0.1:http}]\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):], []string{`listeners[0].address: "127.0.0.1:http": port must be a number in 0..65535`}},
		{"duplicate listener names and addresses", `listeners:
  - {name: a, address: 127.0.0.1:8080}
  - {name: a, address: 127.0.0.1:8080}
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`, []string{`edge.yaml:3: listeners[1].name: duplicate listener name "a" (first at listeners[0])`, `edge.yaml:3: listeners[1].address: 127.0.0.1:8080 is also used by listeners[0]`}},
		{"max_header_bytes", "listeners: [{address: 127.0.0.1:8080, max_header_bytes: 10}]\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):], []string{`edge.yaml:1: listeners[0].max_header_bytes: 10 is outside 1024..1048576`}},
		{"proxy protocol without trusted", `listeners:
  - address: 127.0.0.1:8080
    proxy_protocol:
      enabled: true
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`, []string{`edge.yaml:3: listeners[0].proxy_protocol.trusted: required when proxy_protocol is enabled`}},
		{"cidr host bits", "listeners: [{address: 127.0.0.1:8080, trusted_proxies: [10.0.0.0/8, 10.1.0.0/8]}]\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):],
			[]string{`edge.yaml:1: listeners[0].trusted_proxies[1]: "10.1.0.0/8" has bits set past the prefix length; did you mean 10.0.0.0/8?`}},
		{"cidr garbage", "listeners: [{address: 127.0.0.1:8080, trusted_proxies: [not-an-ip]}]\n" + minimal[len("listeners: [{address: 127.0.0.1:8080}]\n"):],
			[]string{`edge.yaml:1: listeners[0].trusted_proxies[0]: "not-an-ip" is not an address or CIDR`}},
		{"tls without certificates", `listeners:
  - address: 127.0.0.1:8443
    tls:
      min_version: "1.1"
      ocsp: {must_staple: maybe}
      client_cert_header: X-Client
      session_tickets: {key_file: edge.yaml, consul_key: /edge/keys}
      curves: [X25519, secp256r1, X25519]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`, []string{
			`edge.yaml:3: listeners[0].tls.certificates: at least one certificate`,
			`edge.yaml:4: listeners[0].tls.min_version: "1.1" is not one of "1.2", "1.3"`,
			`edge.yaml:8: listeners[0].tls.curves[1]: "secp256r1" is not a key exchange edge knows`,
			`edge.yaml:8: listeners[0].tls.curves[2]: "X25519" is listed twice`,
			`edge.yaml:5: listeners[0].tls.ocsp.must_staple: "maybe" is not one of "refuse", "serve"`,
			`edge.yaml:6: listeners[0].tls.client_cert_header: needs client_ca_file`,
			`edge.yaml:7: listeners[0].tls.session_tickets.consul_key: set key_file or consul_key, not both`,
			`edge.yaml:7: listeners[0].tls.session_tickets.consul_key: "/edge/keys" is not a Consul KV path`,
			`edge.yaml:7: listeners[0].tls.session_tickets.consul_seal_key_file: required with consul_key`,
		}},
		{"tls files", `listeners:
  - address: 127.0.0.1:8443
    tls:
      certificates:
        - cert_file: missing.pem
        - key_file: /
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`, []string{
			`edge.yaml:5: listeners[0].tls.certificates[0].cert_file: missing.pem: no such file`,
			`edge.yaml:5: listeners[0].tls.certificates[0].key_file: required`,
			`edge.yaml:6: listeners[0].tls.certificates[1].cert_file: required`,
			`edge.yaml:6: listeners[0].tls.certificates[1].key_file: /: not a regular file`,
		}},
		{"fleet scope without a prefix", "admin: {api: {scope: fleet}}\n" + minimal, []string{`edge.yaml:1: admin.api.scope: fleet needs consul.fleet.prefix, the Consul KV prefix the fleet shares`}},
		{"fleet upgrades without a prefix", "upgrade: {fleet_concurrency: 1}\n" + minimal, []string{`edge.yaml:1: upgrade.fleet_concurrency: paces upgrades through a Consul semaphore under consul.fleet.prefix, which is not set`}},
		{"fleet upgrades out of range", "upgrade: {fleet_concurrency: 65, fleet_wait: 0s}\nconsul: {fleet: {prefix: edge}}\n" + minimal, []string{
			`edge.yaml:1: upgrade.fleet_concurrency: 65 is outside 0..64 (0 is off)`,
			`edge.yaml:1: upgrade.fleet_wait: must be greater than 0`,
		}},
		{"admin scope and fleet prefix", "admin: {api: {scope: world}}\nconsul: {fleet: {prefix: /edge}}\n" + minimal, []string{
			`edge.yaml:1: admin.api.scope: "world" is not one of "local", "fleet"`,
			`edge.yaml:2: consul.fleet.prefix: "/edge" is not a Consul KV path (no leading /, no spaces, at most 512 bytes)`,
		}},
		{"route to unknown pool", "listeners: [{address: 127.0.0.1:8080}]\npools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]\nroutes: [{default: true, pool: ap}]\n",
			[]string{`edge.yaml:3: routes[0].pool: no pool named "ap" (did you mean "app"?)`}},
		{"two default routes", `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes:
  - {default: true, pool: app}
  - {default: true, pool: app}
`, []string{`edge.yaml:5: routes[1].default: only one default route is allowed (the first is routes[0] at line 4)`}},
		{"default route with hosts", minimal[:len(minimal)-len("routes: [{default: true, pool: app}]\n")] + "routes: [{default: true, hosts: [a.com], pool: app}]\n",
			[]string{`edge.yaml:3: routes[0]: a default route takes no hosts or path_prefix`}},
		{"route host patterns", `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes:
  - hosts:
      - "a.*.com"
      - "example.com:8443"
      - "bad host"
      - "*"
    pool: app
  - hosts: [ok.example.com]
    path_prefix: api
    pool: app
  - {hosts: [OK.example.com], pool: app}
  - {hosts: [ok.example.com], pool: app}
`, []string{
			`edge.yaml:5: routes[0].hosts[0]: "a.*.com" has a wildcard other than a leading "*."`,
			`edge.yaml:6: routes[0].hosts[1]: "example.com:8443" is not a host name: hosts match without a port`,
			`edge.yaml:7: routes[0].hosts[2]: "bad host" is not a valid host name`,
			`edge.yaml:8: routes[0].hosts[3]: "*" has a wildcard other than`,
			`edge.yaml:11: routes[1].path_prefix: "api" must start with /`,
			`edge.yaml:14: routes[3].hosts[0]: "ok.example.com" with path_prefix "/" is already routed by routes[2] (line 13)`,
		}},
		{"hosts compared canonical; consul route hosts checked", `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes:
  - {hosts: [chat.example.com.], pool: app}
  - {hosts: [Chat.Example.COM], pool: app}
consul:
  routes:
    allowed_hosts: ["*.apps.example.com", "a.*.example.com", "x.example.com:80", "bücher.example"]
`, []string{
			`edge.yaml:5: routes[1].hosts[0]: "chat.example.com" with path_prefix "/" is already routed by routes[0] (line 4)`,
			`edge.yaml:8: consul.routes.allowed_hosts[1]: "a.*.example.com" has a wildcard other than a leading "*."`,
			`edge.yaml:8: consul.routes.allowed_hosts[2]: "x.example.com:80" is not a host name: hosts match without a port`,
			`edge.yaml:8: consul.routes.allowed_hosts[3]: "bücher.example" is not a valid host name`,
		}},
		{"route without pool", minimal[:len(minimal)-len("routes: [{default: true, pool: app}]\n")] + "routes: [{default: true}]\n",
			[]string{`edge.yaml:3: routes[0].pool: required`}},
		{"pool problems", `listeners: [{address: 127.0.0.1:8080}]
pools:
  - name: app
    balance: round_robin
    backends:
      - {address: 127.0.0.1:9001, id: a}
      - {address: 127.0.0.1, id: a, weight: -1}
    cookie: {same_site: sometimes, path: nope, name: "bad name"}
    client_ip: {bounded_load: 0.9, min_excess: -1}
    retries: 11
    passive_ejection: {failures: -1}
    limits: {max_connections: -1, connection_rate: -3, connection_burst: -1, connection_rate_per_client_ip: -2}
routes: [{default: true, pool: app}]
`, []string{
			`edge.yaml:4: pools[0].balance: "round_robin" is not one of "least_conn", "cookie", "client_ip"`,
			`edge.yaml:7: pools[0].backends[1].address: "127.0.0.1" is not host:port`,
			`edge.yaml:7: pools[0].backends[1].id: duplicate backend id "a" in this pool (first at line 6)`,
			`edge.yaml:7: pools[0].backends[1].weight: -1 is outside 1..1000`,
			`edge.yaml:8: pools[0].cookie.same_site: "sometimes" is not one of "lax", "strict", "none"`,
			`edge.yaml:8: pools[0].cookie.path: "nope" must start with /`,
			`edge.yaml:8: pools[0].cookie.name: "bad name" is not a valid cookie name`,
			`edge.yaml:9: pools[0].client_ip.bounded_load: 0.9 must be at least 1.0`,
			`edge.yaml:9: pools[0].client_ip.min_excess: -1 must be between 0 and 1000000000`,
			`edge.yaml:10: pools[0].retries: 11 is outside 0..10`,
			`edge.yaml:11: pools[0].passive_ejection.failures: -1 must be >= 0`,
			`edge.yaml:12: pools[0].limits.max_connections: -1 must be >= 0`,
			`edge.yaml:12: pools[0].limits.connection_rate: -3 must be >= 0`,
			`edge.yaml:12: pools[0].limits.connection_burst: -1 must be >= 0`,
			`edge.yaml:12: pools[0].limits.connection_rate_per_client_ip: -2 must be >= 0`,
		}},
		{"duplicate pools", `listeners: [{address: 127.0.0.1:8080}]
pools:
  - {name: app, backends: [{address: 127.0.0.1:9001}]}
  - {name: app, backends: [{address: 127.0.0.1:9002}]}
  - {name: "a b", backends: [{address: 127.0.0.1:9002}]}
routes: [{default: true, pool: app}]
`, []string{`edge.yaml:4: pools[1].name: duplicate pool name "app" (first at line 3)`, `edge.yaml:5: pools[2].name: "a b" may hold only letters`}},
		{"pool without backends", "listeners: [{address: 127.0.0.1:8080}]\npools: [{name: app}]\nroutes: [{default: true, pool: app}]\n",
			[]string{`edge.yaml:2: pools[0].backends: at least one backend is required unless consul.service is set`}},
		{"pool without name", "listeners: [{address: 127.0.0.1:8080}]\npools: [{backends: [{address: 127.0.0.1:9001}]}]\nroutes: [{default: true, pool: app}]\n",
			[]string{`edge.yaml:2: pools[0].name: required`, `routes[0].pool: no pool named "app"`}},
		{"backends and consul", minimalWith("", "consul: {service: chat}"), []string{`edge.yaml:2: pools[0].backends: set either backends or consul.service, not both`}},
		{"health", `listeners: [{address: 127.0.0.1:8080}]
pools:
  - name: app
    backends: [{address: 127.0.0.1:9001}]
    health:
      type: ping
      interval: 1s
      timeout: 2s
      rise: 0
      fall: 0
      path: health
      expect_status: 42
routes: [{default: true, pool: app}]
`, []string{
			`edge.yaml:6: pools[0].health.type: "ping" is not one of "", "tcp", "http", "websocket"`,
			`edge.yaml:8: pools[0].health.timeout: 2s is longer than interval 1s`,
			`edge.yaml:9: pools[0].health.rise: 0 must be at least 1`,
			`edge.yaml:10: pools[0].health.fall: 0 must be at least 1`,
			`edge.yaml:11: pools[0].health.path: "health" must start with /`,
			`edge.yaml:12: pools[0].health.expect_status: 42 is not an HTTP status`,
		}},
		{"websocket settings", minimalWith("", "websocket: {max_frame_bytes: -1, ping_timeout: 5s}"),
			[]string{
				`edge.yaml:2: pools[0].websocket.max_frame_bytes: -1 must be >= 0`,
				`edge.yaml:2: pools[0].websocket.ping_timeout: needs ping_interval`,
			}},
		{"deflate settings", minimalWith("", "websocket: {deflate: squeeze, deflate_max_window_bits: 8}"),
			[]string{
				`edge.yaml:2: pools[0].websocket.deflate: "squeeze" is not one of "", "pass", "strip", "limit"`,
				`edge.yaml:2: pools[0].websocket.deflate_max_window_bits: 8 must be 0 (no cap) or 9..15`,
			}},
		{"rate settings", minimalWith("", "websocket: {rate: {messages_per_second: -1, action: drop}}"),
			[]string{
				`edge.yaml:2: pools[0].websocket.rate.messages_per_second: -1 must be a number >= 0`,
				`edge.yaml:2: pools[0].websocket.rate.action: "drop" is not one of "close", "slow"`,
			}},
		{"deflate limit without a message limit", minimalWith("", "websocket: {deflate: limit}"),
			[]string{
				`edge.yaml:2: pools[0].websocket.deflate: limit needs max_message_bytes`,
			}},
		{"backend_leave settings", minimalWith("", "backend_leave: {connections: close, window: -1s}"),
			[]string{
				`edge.yaml:2: pools[0].backend_leave.connections: "close"`,
				`edge.yaml:2: pools[0].backend_leave.window:`,
			}},
		{"cookie secret missing file", minimalWith("", "balance: cookie, cookie: {secret_file: nope.key}"),
			[]string{`edge.yaml:2: pools[0].cookie: cookie secret_file: nope.key: no such file`}},
		{"cookie secret too short", minimalWith("", "balance: cookie, cookie: {secret_file: "+short+"}"),
			[]string{`edge.yaml:2: pools[0].cookie: cookie secret_file ` + short + `: 11 bytes, need at least 16`}},
		{"cookie secret file and env", minimalWith("", "balance: cookie, cookie: {secret_file: "+short+", secret_env: X}"),
			[]string{`edge.yaml:2: pools[0].cookie.secret_env: set only one of secret_file and secret_env`}},
		{"cookie secret env unset", minimalWith("", "balance: cookie, cookie: {secret_env: EDGE_TEST_SURELY_UNSET_VAR}"),
			[]string{`edge.yaml:2: pools[0].cookie: cookie secret_env: environment variable EDGE_TEST_SURELY_UNSET_VAR is unset or empty`}},
		{"consul", `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
consul:
  address: ftp://consul:8500
  token: abc
  token_file: t.txt
  ca_file: ca.pem
  register: {enabled: true, service: ""}
`, []string{
			`edge.yaml:5: consul.address: "ftp://consul:8500" must be host:port or http(s)://host:port`,
			`edge.yaml:7: consul.token_file: set only one of token and token_file`,
			`edge.yaml:8: consul.ca_file: ca.pem: no such file`,
			`edge.yaml:9: consul.register.service: required when register is enabled`,
		}},
		{"metrics listener", `listeners: [{address: 127.0.0.1:8080}]
pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
admin: {address: 127.0.0.1:9901}
metrics: {address: 127.0.0.1:9901}
consul:
  register: {enabled: true, service: edge, metrics_service: edge}
`, []string{
			`edge.yaml:5: metrics.address: "127.0.0.1:9901" is the admin listener's address`,
			`edge.yaml:7: consul.register.metrics_service: "edge" is also consul.register.service`,
		}},
		{"metrics address", minimalWith("metrics: {address: nowhere}", ""), []string{`metrics.address: "nowhere" is not host:port`}},
		{"unknown alias", minimalWith("log: *nope", ""), []string{`edge.yaml: YAML syntax: unknown anchor 'nope' referenced`}},
		{"bad merge", minimalWith("log:\n  <<: [1]", ""), []string{`edge.yaml:5: log: merge key << takes a mapping or a list of mappings, got an integer`}},
		{"self merge", minimalWith("log: &l\n  <<: *l", ""), []string{`log: merge keys nested more than 16 deep`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := parseErrors(t, tc.src)
			text := errs.Error()
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("error text lacks %q; got:\n%s", w, text)
				}
			}
			for _, e := range errs.List {
				if e.File != "edge.yaml" {
					t.Errorf("error %q: got file %q, want edge.yaml", e, e.File)
				}
			}
		})
	}
}

// Every problem in a file is reported in one pass, in line order, each
// with its line.
func TestAllErrorsAtOnce(t *testing.T) {
	errs := parseErrors(t, `listeners:
  - address: 127.0.0.1:8080
    bogus: 1
log: {level: loud}
pools:
  - name: app
    backends: [{address: 127.0.0.1:9001}]
    timeouts: {dial: soon}
    retries: many
routes: [{default: true, pool: nope}]
drain: {window: 1m}
`)
	want := []string{
		`edge.yaml:3: listeners[0]: unknown key "bogus"`,
		`edge.yaml:4: log.level: "loud" is not one of`,
		`edge.yaml:8: pools[0].timeouts.dial: invalid duration "soon"`,
		`edge.yaml:9: pools[0].retries: expected an integer, got a string`,
		`edge.yaml:10: routes[0].pool: no pool named "nope"`,
		`edge.yaml:11: drain.window: 1m0s is longer than drain.timeout 30s`,
	}
	if got := len(errs.List); got != len(want) {
		t.Errorf("got %d errors, want %d:\n%s", got, len(want), errs)
	}
	for i, w := range want {
		if i < len(errs.List) && !strings.HasPrefix(errs.List[i].Error(), w) {
			t.Errorf("error %d: got %q, want prefix %q", i, errs.List[i], w)
		}
	}
	// The individual problems are reachable with errors.As.
	var one *Error
	if !errors.As(error(errs), &one) || one.Line != 3 || one.Path != "listeners[0]" {
		t.Errorf("errors.As(*Error): got %+v, want the first problem (line 3, listeners[0])", one)
	}
}

// A value that failed to decode is reported once, not again by the checks
// that would see its zero value.
func TestDecodeErrorNotRepeated(t *testing.T) {
	errs := parseErrors(t, `listeners: [{address: [127.0.0.1, 8080]}]
pools: [{name: {app: 1}, backends: [{address: 127.0.0.1:9001}]}]
routes: [{default: true, pool: app}]
`)
	want := []string{
		`edge.yaml:1: listeners[0].address: expected a string, got a list`,
		`edge.yaml:2: pools[0].name: expected a string, got a mapping`,
	}
	var got []string
	for _, e := range errs.List {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("got errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNotAMappingReportedOnce(t *testing.T) {
	errs := parseErrors(t, "- a\n- b\n")
	if got, want := errs.Error(), "edge.yaml:1: expected a mapping, got a list"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	c := mustParse(t, `x-timeouts: &slow {dial: 5s, idle: 0}
listeners: [{address: 127.0.0.1:8080}]
pools:
  - name: a
    backends: &be [{address: 127.0.0.1:9001}]
    timeouts: *slow
  - name: b
    backends: *be
    timeouts:
      <<: *slow
      dial: 1s
routes: [{default: true, pool: a}, {hosts: [b.example], pool: b}]
`)
	a, b := c.Pools[0], c.Pools[1]
	if got, want := b.Backends[0].Address, "127.0.0.1:9001"; got != want {
		t.Errorf("aliased backend: got %q, want %q", got, want)
	}
	if got, want := b.Timeouts.Dial.Std(), time.Second; got != want {
		t.Errorf("merged dial: got %v, want %v (explicit key wins)", got, want)
	}
	if b.Timeouts.Idle != 0 || a.Timeouts.Idle != 0 {
		t.Errorf("merged idle: got %v and %v, want 0", a.Timeouts.Idle, b.Timeouts.Idle)
	}
	if got, want := b.Timeouts.Write.Std(), 30*time.Second; got != want {
		t.Errorf("defaulted write: got %v, want %v", got, want)
	}
}

// Merge keys that merge lists of merges grow exponentially; the node
// budget turns that into an error instead of a hang.
func TestMergeBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString(minimal)
	b.WriteString("m0: &m0 {level: info}\n")
	for i := 1; i < 10; i++ {
		p := fmt.Sprintf("*m%d", i-1)
		fmt.Fprintf(&b, "m%d: &m%d {<<: [%s]}\n", i, i, strings.Repeat(p+",", 9)+p)
	}
	b.WriteString("log: *m9\n")
	errs := parseErrors(t, b.String())
	if text := errs.Error(); !strings.Contains(text, "document too large") {
		t.Errorf("got %v, want the node budget exceeded", text)
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	const token = "tok-7d1b9c0e-secret"
	c := mustParse(t, minimal+"consul: {token: "+token+"}\n")
	if got, _ := c.Consul.ACLToken(); string(got) != token {
		t.Fatalf("ACLToken: got %q, want the configured token", got)
	}
	var logJSON, logText bytes.Buffer
	slog.New(slog.NewJSONHandler(&logJSON, nil)).Info("config", "cfg", c, "consul", c.Consul, "token", c.Consul.Token)
	slog.New(slog.NewTextHandler(&logText, nil)).Info("config", "consul", c.Consul, "token", c.Consul.Token)
	for name, s := range map[string]string{
		"String":   c.String(),
		"%v":       fmt.Sprintf("%v", c),
		"%+v":      fmt.Sprintf("%+v", c.Consul),
		"%#v":      fmt.Sprintf("%#v", c.Consul),
		"%s token": fmt.Sprint(c.Consul.Token),
		"slog":     logJSON.String() + logText.String(),
	} {
		if strings.Contains(s, token) {
			t.Errorf("%s shows the token: %s", name, s)
		}
		if !strings.Contains(s, "[redacted]") {
			t.Errorf("%s: got %s, want [redacted] in place of the token", name, s)
		}
	}

	// Wrong types and bad files never echo secret content.
	dir := t.TempDir()
	shortFile := filepath.Join(dir, "k")
	if err := os.WriteFile(shortFile, []byte("qzx9-short"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_TEST_SHORT_SECRET", "vbn8-env")
	for _, src := range []string{
		minimal + "consul: {token: [" + token + "]}\n",
		minimal + "consul: {token: {" + token + ": 1}}\n",
		minimal + "consul: {token: " + token + ", token_file: x}\n",
		minimalWith("", "balance: cookie, cookie: {secret_file: "+shortFile+"}"),
		minimalWith("", "balance: cookie, cookie: {secret_env: EDGE_TEST_SHORT_SECRET}"),
	} {
		errs := parseErrors(t, src)
		text := errs.Error()
		for _, secret := range []string{token, "qzx9", "vbn8"} {
			if strings.Contains(text, secret) {
				t.Errorf("error shows a secret: %s", text)
			}
		}
	}
}

func TestCookieSecrets(t *testing.T) {
	dir := t.TempDir()
	cur := filepath.Join(dir, "cur")
	if err := os.WriteFile(cur, []byte("  current-key-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_TEST_PREV", "previous-key-0123456789")
	for _, tc := range []struct {
		name     string
		k        Cookie
		cur      string
		prev     []string
		errMatch string
	}{
		{name: "none"},
		{name: "file and env", k: Cookie{SecretFile: cur, PreviousSecretEnv: "EDGE_TEST_PREV"}, cur: "current-key-0123456789", prev: []string{"previous-key-0123456789"}},
		{name: "env current, unset previous", k: Cookie{SecretEnv: "EDGE_TEST_PREV", PreviousSecretEnv: "EDGE_TEST_SURELY_UNSET"}, cur: "previous-key-0123456789"},
		{name: "previous file missing", k: Cookie{PreviousSecretFile: filepath.Join(dir, "gone")}, errMatch: "previous_secret_file"},
		{name: "device", k: Cookie{SecretFile: os.DevNull}, errMatch: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p, err := tc.k.Secrets()
			if tc.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
					t.Fatalf("err: got %v, want one mentioning %q", err, tc.errMatch)
				}
				return
			}
			if err != nil {
				t.Fatalf("Secrets: %v", err)
			}
			if string(c) != tc.cur {
				t.Errorf("current: got %q, want %q", c, tc.cur)
			}
			var ps []string
			for _, b := range p {
				ps = append(ps, string(b))
			}
			if !slices.Equal(ps, tc.prev) {
				t.Errorf("previous: got %q, want %q", ps, tc.prev)
			}
		})
	}
}

func TestConsulTokenFromEnv(t *testing.T) {
	t.Setenv(ConsulTokenEnv, "env-token-value")
	var c Consul
	got, err := c.ACLToken()
	if err != nil || string(got) != "env-token-value" {
		t.Errorf("ACLToken: got %q, %v; want the CONSUL_HTTP_TOKEN value", got, err)
	}
}

func TestWarnings(t *testing.T) {
	c := mustParse(t, `listeners: [{address: 127.0.0.1:8080}]
pools:
  - {name: app, balance: cookie, backends: [{address: 127.0.0.1:9001}]}
  - {name: spare, backends: [{address: 127.0.0.1:9002}], client_ip: {bounded_load: 2}, health: {path: /h}}
routes: [{default: true, pool: app}]
`)
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.Error())
	}
	want := []string{
		`edge.yaml:3: pools[0].cookie: no secret_file or secret_env`,
		`edge.yaml:4: pools[1].client_ip: ignored: balance is least_conn, not client_ip`,
		`edge.yaml:4: pools[1].health: health.type is not set`,
		`edge.yaml:4: pools[1]: pool "spare" is not used by any route`,
	}
	if len(got) != len(want) {
		t.Fatalf("got warnings\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("warnings lack %q; got\n%s", w, strings.Join(got, "\n"))
		}
	}
}

// Validate works on a Config built in code, without file positions.
func TestValidateInCode(t *testing.T) {
	c := mustParse(t, minimal)
	c.Pools[0].Retries = -1
	err := c.Validate()
	if got, want := fmt.Sprint(err), "pools[0].retries: -1 is outside 0..10"; !strings.Contains(got, want) {
		t.Errorf("got %q, want it to contain %q", got, want)
	}
	var empty Config
	if err := empty.Validate(); err == nil || !strings.Contains(err.Error(), "\nlisteners: at least one listener is required") {
		t.Errorf("empty config: got %v, want the missing listener reported without a file", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error naming the file", err)
	}
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"017", 17, true}, {"-5", -5, true}, {"+5", 5, true}, {"1_000", 1000, true},
		{"0x10", 16, true}, {"0o17", 15, true}, {"0b101", 5, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"x", 0, false},
	} {
		got, err := parseInt(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseInt(%q): got %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestMaxMessageBytesDefault: a frame-aware pool bounds messages at 4 MiB
// (never below its frame limit) unless the file says otherwise, zero
// included; an opaque pool does not.
func TestMaxMessageBytesDefault(t *testing.T) {
	for _, tc := range []struct {
		ws   string
		want int64
	}{
		{"{max_frame_bytes: 1048576}", 4 << 20},
		{"{ping_interval: 30s}", 4 << 20},
		{"{max_frame_bytes: 8388608}", 8 << 20},
		{"{max_frame_bytes: 1048576, max_message_bytes: 0}", 0},
		{"{max_message_bytes: 65536}", 65536},
	} {
		c := mustParse(t, strings.Replace(minimal, "backends: [{address: 127.0.0.1:9001}]", "backends: [{address: 127.0.0.1:9001}], websocket: "+tc.ws, 1))
		if got := c.Pools[0].WebSocket.MaxMessageBytes; got != tc.want {
			t.Errorf("websocket %s: max_message_bytes %d, want %d", tc.ws, got, tc.want)
		}
	}
}

// TestDefaultPool: a pool declared outside the file starts from exactly
// what Load makes of a file pool that sets nothing, so declared and file
// pools share every default (limits, timeouts, health, cookie).
func TestDefaultPool(t *testing.T) {
	got := DefaultPool()
	want := mustParse(t, minimal).Pools[0]
	want.Name, want.Backends = "", nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DefaultPool:\n got %+v\nwant %+v", got, want)
	}
}

package conf

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgelb/edge/internal/hostname"
)

// Validate checks the whole configuration and returns an *Errors listing
// every problem, each with the file and line of the setting when the
// Config came from Parse or Load. It also reads secret files, so that a
// missing key is found at start and at reload rather than on the first
// sticky connection, and refreshes [Config.Warnings].
// maxMinExcess bounds client_ip.min_excess: far above any real pool, so a
// typo cannot overflow the bound arithmetic.
const maxMinExcess = 1_000_000_000

func (c *Config) Validate() error {
	errs, warns := c.validate()
	c.warnings = warns
	return asError(errs)
}

// Validate checks a pool built outside the file, such as DefaultPool with
// a registry declaration's overrides, by the rules of a file pool; its name
// is not checked (such pools name themselves). Warnings are dropped.
func (p *Pool) Validate() error {
	v := &validator{c: &Config{}}
	q := *p
	q.Name = "pool"
	v.pool("pool", &q)
	return asError(v.errs)
}

type validator struct {
	c     *Config
	errs  []*Error
	warns []*Error
}

func (v *validator) at(path, format string, args ...any) *Error {
	e := &Error{Line: v.c.src.line(path), Path: path, Msg: fmt.Sprintf(format, args...)}
	if v.c.src != nil {
		e.File = v.c.src.file
	}
	return e
}

func (v *validator) errf(path, format string, args ...any) {
	v.errs = append(v.errs, v.at(path, format, args...))
}

func (v *validator) warnf(path, format string, args ...any) {
	v.warns = append(v.warns, v.at(path, format, args...))
}

func (v *validator) line(path string) int { return v.c.src.line(path) }

func (c *Config) validate() (errs, warns []*Error) {
	v := &validator{c: c}
	v.admin(&c.Admin)
	if c.Admin.API.TokenFile != "" && c.Admin.API.TokenEnv != "" {
		v.errf("admin.api.token_env", "set only one of token_file and token_env")
	}
	v.secretFile("admin.api.token_file", c.Admin.API.TokenFile, false)
	if c.Metrics.Address != "" && v.hostPort("metrics.address", c.Metrics.Address, true) && c.Metrics.Address == c.Admin.Address {
		v.errf("metrics.address", "%q is the admin listener's address; leave metrics.address out to serve /metrics there", c.Metrics.Address)
	}
	if c.StateDir != "" {
		if fi, err := os.Stat(c.StateDir); err == nil && !fi.IsDir() {
			v.errf("state_dir", "%s is not a directory", c.StateDir)
		}
	}
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, LogJSON, LogText)
	v.nonNegative("limits.max_connections", c.Limits.MaxConnections)
	v.lifecycle(c)

	if len(c.Listeners) == 0 {
		v.errf("listeners", "at least one listener is required")
	}
	names := map[string]string{}
	addrs := map[string]string{}
	for i := range c.Listeners {
		v.listener(index("listeners", i), &c.Listeners[i], names, addrs)
	}

	pools := map[string]int{}
	for i := range c.Pools {
		p := index("pools", i)
		v.pool(p, &c.Pools[i])
		name := c.Pools[i].Name
		if name == "" {
			continue
		}
		if j, dup := pools[name]; dup {
			v.errf(p+".name", "duplicate pool name %q (first at line %d)", name, v.line(index("pools", j)))
			continue
		}
		pools[name] = i
	}
	used := v.routes(pools)
	for i := range c.Pools {
		if name := c.Pools[i].Name; name != "" && !used[name] && len(c.Routes) > 0 {
			v.warnf(index("pools", i), "pool %q is not used by any route", name)
		}
	}
	v.consul()
	v.auth(&c.Auth)
	return v.errs, v.warns
}

// lifecycle checks how the process stops and hands over: drain and upgrade.
func (v *validator) lifecycle(c *Config) {
	v.duration("drain.window", c.Drain.Window, true)
	v.duration("drain.delay", c.Drain.Delay, true)
	v.duration("drain.timeout", c.Drain.Timeout, false)
	if c.Drain.Timeout > 0 && c.Drain.Window > c.Drain.Timeout {
		v.errf("drain.window", "%s is longer than drain.timeout %s", c.Drain.Window, c.Drain.Timeout)
	}
	v.duration("upgrade.timeout", c.Upgrade.Timeout, false)
	v.duration("upgrade.fleet_wait", c.Upgrade.FleetWait, false)
	switch n := c.Upgrade.FleetConcurrency; {
	case n < 0 || n > 64:
		v.errf("upgrade.fleet_concurrency", "%d is outside 0..64 (0 is off)", n)
	case n > 0 && c.Consul.Fleet.Prefix == "":
		v.errf("upgrade.fleet_concurrency", "paces upgrades through a Consul semaphore under consul.fleet.prefix, which is not set")
	}
}

// weakSecret warns, at the setting naming it, about a cookie key whose
// bytes carry less than minSecretBits by their own frequencies: a key such
// as "aaaaaaaaaaaaaaaaaaaa" passes the length check yet can be guessed.
func (v *validator) weakSecret(cp, what, file string, key []byte) {
	bits := secretBits(key)
	if bits >= minSecretBits {
		return
	}
	at := cp + "." + what + "_env"
	if file != "" {
		at = cp + "." + what + "_file"
	}
	v.warnf(at, "weak key: about %.0f bits by its byte frequencies, want at least %d (e.g. head -c 32 /dev/urandom | base64)", bits, minSecretBits)
}

// admin refuses an admin address that is not loopback unless allow_public
// says so: the admin listener has no authentication, and /status and
// /metrics describe every backend.
func (v *validator) admin(a *Admin) {
	if !v.hostPort("admin.address", a.Address, true) {
		return
	}
	for i, h := range a.AllowedHosts {
		at := fmt.Sprintf("admin.allowed_hosts[%d]", i)
		if _, err := netip.ParseAddr(h); err != nil && !isDNSName(h) {
			v.errf(at, "%q is neither an IP address nor a host name (exact, without a port or a wildcard)", h)
		}
	}
	v.oneOf("admin.api.scope", a.API.Scope, ScopeLocal, ScopeFleet)
	if a.API.Scope == ScopeFleet && v.c.Consul.Fleet.Prefix == "" {
		v.errf("admin.api.scope", "fleet needs consul.fleet.prefix, the Consul KV prefix the fleet shares")
	}
	host, _, _ := net.SplitHostPort(a.Address)
	switch {
	case isLoopback(host):
	case !a.AllowPublic:
		v.errf("admin.address", "%q is not a loopback address: the admin listener has no authentication; set admin.allow_public: true to serve it there", a.Address)
	default:
		v.warnf("admin.address", "%q is not a loopback address: /metrics, /status and the admin API are open to whoever reaches it", a.Address)
	}
}

// isLoopback reports whether a listen host stays on the machine; "" (every
// interface) does not.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

func (v *validator) listener(path string, l *Listener, names, addrs map[string]string) {
	if l.Name != "" {
		v.name(path+".name", l.Name)
		if first, dup := names[l.Name]; dup {
			v.errf(path+".name", "duplicate listener name %q (first at %s)", l.Name, first)
		} else {
			names[l.Name] = path
		}
	} else {
		v.errf(path+".name", "must not be empty")
	}
	if l.Address == "" {
		v.errf(path+".address", "required: host:port to listen on, e.g. 127.0.0.1:8443 or :443")
	} else if v.hostPort(path+".address", l.Address, true) {
		if _, port, _ := net.SplitHostPort(l.Address); port != "0" {
			if first, dup := addrs[l.Address]; dup {
				v.errf(path+".address", "%s is also used by %s", l.Address, first)
			} else {
				addrs[l.Address] = path
			}
		}
	}
	if l.TLS != nil {
		v.tls(path+".tls", l.TLS)
	} else if l.StrictSNIHost {
		v.warnf(path+".strict_sni_host", "ignored: the listener has no tls, so no SNI to compare Host with")
	}
	pp := path + ".proxy_protocol"
	if l.ProxyProtocol.Enabled && len(l.ProxyProtocol.Trusted) == 0 {
		v.errf(pp+".trusted", "required when proxy_protocol is enabled: a PROXY header from anyone would let any client choose its address")
	}
	v.duration(pp+".timeout", l.ProxyProtocol.Timeout, false)
	v.duration(path+".read_header_timeout", l.ReadHeaderTimeout, false)
	v.duration(path+".tls_handshake_timeout", l.TLSHandshakeTimeout, false)
	v.duration(path+".read_body_timeout", l.ReadBodyTimeout, false)
	if l.MaxHeaderBytes < 1024 || l.MaxHeaderBytes > 1<<20 {
		v.errf(path+".max_header_bytes", "%d is outside 1024..1048576", l.MaxHeaderBytes)
	}
}

func (v *validator) tls(path string, t *TLS) {
	if len(t.Certificates) == 0 {
		v.errf(path+".certificates", "at least one certificate (cert_file and key_file) is required")
	}
	for i, c := range t.Certificates {
		p := index(path+".certificates", i)
		v.file(p+".cert_file", c.CertFile, true)
		v.secretFile(p+".key_file", c.KeyFile, true)
		v.file(p+".issuer_file", c.IssuerFile, false)
	}
	v.oneOf(path+".min_version", t.MinVersion, "1.2", "1.3")
	v.curves(path+".curves", t.Curves)
	v.file(path+".client_ca_file", t.ClientCAFile, false)
	if t.ClientCertHeader != "" {
		if t.ClientCAFile == "" {
			v.errf(path+".client_cert_header", "needs client_ca_file: without client certificates there is no verified identity to send")
		}
		if !isToken(t.ClientCertHeader) {
			v.errf(path+".client_cert_header", "%q is not a valid header name", t.ClientCertHeader)
		}
	}
	st := path + ".session_tickets"
	v.duration(st+".rotate_every", t.SessionTickets.RotateEvery, false)
	if t.SessionTickets.Keep < 1 || t.SessionTickets.Keep > 100 {
		v.errf(st+".keep", "%d is outside 1..100", t.SessionTickets.Keep)
	}
	v.secretFile(st+".key_file", t.SessionTickets.KeyFile, false)
	if k := t.SessionTickets.ConsulKey; k != "" {
		if t.SessionTickets.KeyFile != "" {
			v.errf(st+".consul_key", "set key_file or consul_key, not both")
		}
		v.consulKey(st+".consul_key", k)
		if f := t.SessionTickets.ConsulSealKeyFile; f == "" {
			// Absent, it has no line of its own: the error points at
			// consul_key, the line that needs it.
			e := v.at(st+".consul_seal_key_file", "required with consul_key: the keys in Consul KV are sealed with it, so that a reader of the entry cannot decrypt sessions (make one with `openssl rand -hex 32`, the same on every edge)")
			if e.Line == 0 {
				e.Line = v.line(st + ".consul_key")
			}
			v.errs = append(v.errs, e)
		} else if k, err := t.SessionTickets.SealKey(); err != nil {
			v.errf(st+".consul_seal_key_file", "%v", err)
		} else {
			clear(k)
		}
	} else if t.SessionTickets.ConsulSealKeyFile != "" {
		v.warnf(st+".consul_seal_key_file", "ignored without consul_key")
	}
	v.oneOf(path+".ocsp.must_staple", t.OCSP.MustStaple, MustStapleRefuse, MustStapleServe)
	if p := t.OCSP.ConsulPrefix; p != "" {
		v.consulKey(path+".ocsp.consul_prefix", p)
	}
}

// routes checks the routes and returns the names of the pools they use.
func (v *validator) routes(pools map[string]int) map[string]bool {
	c := v.c
	used := map[string]bool{}
	if len(c.Routes) == 0 && len(c.Listeners) > 0 {
		v.warnf("routes", "no routes: every request will be answered 421")
	}
	poolNamesKnown := v.poolNamesKnown()
	defaultRoute := -1
	claimed := map[string]string{} // host + " " + prefix -> route path
	for i, r := range c.Routes {
		path := index("routes", i)
		v.routePool(path, r.Pool, pools, poolNamesKnown)
		used[r.Pool] = true
		if r.Default {
			defaultRoute = v.defaultRoute(path, i, r, defaultRoute)
			continue
		}
		if !strings.HasPrefix(r.PathPrefix, "/") || strings.ContainsAny(r.PathPrefix, "?# \t") {
			v.errf(path+".path_prefix", "%q must start with / and hold no query, fragment or space", r.PathPrefix)
		}
		v.routeHosts(path, r, claimed)
	}
	return used
}

// poolNamesKnown is false when a pool name failed to decode: every route
// to it would look dangling, so that check is skipped.
func (v *validator) poolNamesKnown() bool {
	for i := range v.c.Pools {
		if v.c.src != nil && v.c.src.isBad(index("pools", i)+".name") {
			return false
		}
	}
	return true
}

// routePool checks that a route names a pool that exists.
func (v *validator) routePool(path, pool string, pools map[string]int, known bool) {
	if pool == "" {
		v.errf(path+".pool", "required: the name of a pool")
		return
	}
	if _, ok := pools[pool]; ok || !known {
		return
	}
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	slices.Sort(names)
	v.errf(path+".pool", "no pool named %q%s", pool, suggest(pool, names))
}

// defaultRoute checks route i, a default route, and returns the index of
// the first default route.
func (v *validator) defaultRoute(path string, i int, r Route, first int) int {
	if first >= 0 {
		v.errf(path+".default", "only one default route is allowed (the first is routes[%d] at line %d)", first, v.line(index("routes", first)))
	} else {
		first = i
	}
	if len(r.Hosts) > 0 || r.PathPrefix != "" {
		v.errf(path, "a default route takes no hosts or path_prefix: it catches what no other route matches")
	}
	return first
}

// routeHosts checks a route's host patterns and that no host and prefix
// is routed twice; claimed maps host + " " + prefix to the route's path.
func (v *validator) routeHosts(path string, r Route, claimed map[string]string) {
	hosts := r.Hosts
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	for j, h := range hosts {
		hp := path + ".hosts"
		if len(r.Hosts) > 0 {
			hp = index(hp, j)
			if msg := checkHostPattern(h); msg != "" {
				v.errf(hp, "%q %s", h, msg)
				continue
			}
		}
		key := h + " " + r.PathPrefix
		if first, dup := claimed[key]; dup {
			what := "any host"
			if h != "" {
				what = strconv.Quote(h)
			}
			v.errf(hp, "%s with path_prefix %q is already routed by %s (line %d)", what, r.PathPrefix, first, v.line(first))
			continue
		}
		claimed[key] = path
	}
}

// checkHostPattern accepts an exact DNS name or "*.domain" (see
// hostname.Pattern); it returns what is wrong otherwise.
func checkHostPattern(h string) string {
	_, err := hostname.Pattern(h)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, hostname.ErrWildcard):
		return err.Error()
	case errors.Is(err, hostname.ErrPort):
		return "is not a host name: hosts match without a port"
	default:
		return "is not a valid host name: it " + err.Error()
	}
}

// isDNSName reports whether s, the host of an address, is a host name by
// the rules routes use (hostname.Pattern), without a wildcard.
func isDNSName(s string) bool {
	c, err := hostname.Pattern(s)
	return err == nil && !hostname.IsWildcard(c)
}

func (v *validator) pool(path string, p *Pool) {
	if p.Name == "" {
		v.errf(path+".name", "required")
	} else {
		v.name(path+".name", p.Name)
	}
	v.oneOf(path+".balance", p.Balance, BalanceLeastConn, BalanceCookie, BalanceClientIP)
	v.backends(path, p)
	v.cookie(path+".cookie", p)
	v.clientIP(path+".client_ip", p)
	v.timeouts(path, p)
	v.passiveEjection(path+".passive_ejection", p.PassiveEjection)
	if m := p.MaxResponseHeaderBytes; m < 1024 || m > 1<<20 {
		v.errf(path+".max_response_header_bytes", "%d is outside 1024..1048576", m)
	}
	v.poolLimits(path+".limits", p.Limits)
	if s := p.Consul.Service; s != "" && strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' }) {
		v.errf(path+".consul.service", "%q is not a valid Consul service name", s)
	}
	v.health(path+".health", p.Health)
	v.webSocket(path+".websocket", p.WebSocket)
	v.backendLeave(path+".backend_leave", p.BackendLeave)
	v.poolAuth(path+".auth", p)
	v.rebalance(path+".rebalance", p)
}

func (v *validator) rebalance(path string, p *Pool) {
	r := p.Rebalance
	if !r.Enabled {
		return
	}
	if p.Balance == BalanceClientIP {
		v.errf(path+".enabled", "not with balance client_ip: its hash sends a moved client back to the backend it left (its bounded load spills instead)")
	}
	if r.Tolerance < 0.01 || r.Tolerance > 1 {
		v.errf(path+".tolerance", "%v is outside 0.01..1", r.Tolerance)
	}
	v.duration(path+".settle", r.Settle, true)
	v.duration(path+".min_age", r.MinAge, true)
	if r.Rate <= 0 || r.Rate > 100000 {
		v.errf(path+".rate", "%v is outside (0, 100000]", r.Rate)
	}
}

// backends checks a pool's static members: either they or consul.service,
// each with an address, a distinct id and a weight in range.
func (v *validator) backends(path string, p *Pool) {
	switch {
	case p.Consul.Service != "" && len(p.Backends) > 0:
		v.errf(path+".backends", "set either backends or consul.service, not both")
	case p.Consul.Service == "" && len(p.Backends) == 0:
		v.errf(path+".backends", "at least one backend is required unless consul.service is set")
	}
	ids := map[string]int{}
	for i, b := range p.Backends {
		bp := index(path+".backends", i)
		if b.Address == "" {
			v.errf(bp+".address", "required: host:port of the backend")
		} else {
			v.hostPort(bp+".address", b.Address, false)
		}
		if b.ID == "" {
			v.errf(bp+".id", "must not be empty")
		} else if !isID(b.ID) {
			v.errf(bp+".id", "%q may hold only printable ASCII without spaces, quotes, commas, semicolons or backslashes (it travels in cookies), at most 128 bytes", b.ID)
		} else if j, dup := ids[b.ID]; dup {
			v.errf(bp+".id", "duplicate backend id %q in this pool (first at line %d); give each backend a distinct id", b.ID, v.line(index(path+".backends", j)))
		} else {
			ids[b.ID] = i
		}
		if b.Weight < 1 || b.Weight > 1000 {
			v.errf(bp+".weight", "%d is outside 1..1000", b.Weight)
		}
		if len(b.Version) > 64 || strings.ContainsFunc(b.Version, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			v.errf(bp+".version", "%q: at most 64 printable ASCII bytes without spaces", b.Version)
		}
	}
}

// cookie checks balance: cookie's settings, and warns when they are set
// for another mode.
func (v *validator) cookie(cp string, p *Pool) {
	k := p.Cookie
	if !isToken(k.Name) {
		v.errf(cp+".name", "%q is not a valid cookie name", k.Name)
	}
	if !strings.HasPrefix(k.Path, "/") || strings.ContainsFunc(k.Path, func(r rune) bool { return r == ';' || r < 0x20 || r == 0x7f }) {
		v.errf(cp+".path", "%q must start with / and hold no ';' or control characters", k.Path)
	}
	v.duration(cp+".max_age", k.MaxAge, true)
	v.oneOf(cp+".same_site", k.SameSite, SameSiteLax, SameSiteStrict, SameSiteNone)
	if k.SecretFile != "" && k.SecretEnv != "" {
		v.errf(cp+".secret_env", "set only one of secret_file and secret_env")
	}
	if k.PreviousSecretFile != "" && k.PreviousSecretEnv != "" {
		v.errf(cp+".previous_secret_env", "set only one of previous_secret_file and previous_secret_env")
	}
	v.cookieFleet(cp, k)
	v.cookieSecrets(cp, p)
}

// cookieFleet checks the fleet's cookie keys (consul_key and what goes
// with it).
func (v *validator) cookieFleet(cp string, k Cookie) {
	if k.ConsulKey != "" {
		if k.SecretFile != "" || k.SecretEnv != "" || k.PreviousSecretFile != "" || k.PreviousSecretEnv != "" {
			v.errf(cp+".consul_key", "set the secret settings or consul_key, not both")
		}
		v.consulKey(cp+".consul_key", k.ConsulKey)
		v.duration(cp+".rotate_every", k.RotateEvery, false)
		if k.Keep < 1 || k.Keep > 15 {
			v.errf(cp+".keep", "%d is outside 1..15", k.Keep)
		}
	}
}

// cookieSecrets reads the cookie secrets of a cookie pool and judges
// them, and warns when cookie settings are set for another mode.
func (v *validator) cookieSecrets(cp string, p *Pool) {
	k := p.Cookie
	if p.Balance == BalanceCookie {
		cur, prev, err := k.Secrets()
		switch {
		case err != nil:
			v.errf(cp, "%v", err)
		case k.ConsulKey != "":
			// The fleet's keys, from Consul KV: nothing to read here.
		case k.SecretFile == "" && k.SecretEnv == "":
			v.warnf(cp, "no secret_file or secret_env (nor consul_key): cookies are signed with a random key per process, so stickiness survives neither a restart nor a second edge")
		default:
			v.weakSecret(cp, "secret", k.SecretFile, cur)
			if len(prev) > 0 {
				v.weakSecret(cp, "previous_secret", k.PreviousSecretFile, prev[0])
			}
		}
	} else if v.c.src.has(cp) {
		v.warnf(cp, "ignored: balance is %s, not cookie", p.Balance)
	}
}

// clientIP checks balance: client_ip's settings, and warns when they are
// set for another mode.
func (v *validator) clientIP(cp string, p *Pool) {
	if b := p.ClientIP.BoundedLoad; math.IsNaN(b) || b < 1 {
		v.errf(cp+".bounded_load", "%g must be at least 1.0 (1.0 is a perfect spread, more lets hashing keep more clients in place)", b)
	}
	if m := p.ClientIP.MinExcess; m < 0 || m > maxMinExcess {
		v.errf(cp+".min_excess", "%d must be between 0 and %d", m, maxMinExcess)
	}
	if p.Balance != BalanceClientIP && v.c.src.has(cp) {
		v.warnf(cp, "ignored: balance is %s, not client_ip", p.Balance)
	}
}

// timeouts checks the backend leg's timeouts and retries.
func (v *validator) timeouts(path string, p *Pool) {
	t := path + ".timeouts"
	v.duration(t+".dial", p.Timeouts.Dial, false)
	v.duration(t+".handshake", p.Timeouts.Handshake, false)
	v.duration(t+".idle", p.Timeouts.Idle, true)
	v.duration(t+".write", p.Timeouts.Write, false)
	if p.Retries < 0 || p.Retries > 10 {
		v.errf(path+".retries", "%d is outside 0..10", p.Retries)
	}
	v.duration(path+".slow_start", p.SlowStart, true)
}

// passiveEjection checks passive_ejection; its other settings matter only
// when failures turns it on.
func (v *validator) passiveEjection(pe string, e PassiveEjection) {
	if e.Failures < 0 {
		v.errf(pe+".failures", "%d must be >= 0 (0 turns passive ejection off)", e.Failures)
	} else if e.Failures > 0 {
		v.duration(pe+".window", e.Window, false)
		v.duration(pe+".cooldown", e.Cooldown, false)
		if m := e.MaxEjectionPercent; m < 1 || m > 100 {
			v.errf(pe+".max_ejection_percent", "%d is outside 1..100", m)
		}
	}
}

// poolLimits checks a pool's admission limits; 0 is unlimited.
func (v *validator) poolLimits(lp string, l PoolLimits) {
	v.nonNegative(lp+".max_connections", l.MaxConnections)
	v.nonNegative(lp+".max_connections_per_backend", int64(l.MaxConnectionsPerBackend))
	v.limitScope(lp+".max_connections_per_backend_scope", l.MaxConnectionsPerBackendScope, l.MaxConnectionsPerBackend > 0)
	v.limitScope(lp+".connection_rate_scope", l.ConnectionRateScope, l.ConnectionRate > 0)
	if r := l.ConnectionRate; math.IsNaN(r) || r < 0 {
		v.errf(lp+".connection_rate", "%g must be >= 0 (0 is unlimited)", r)
	}
	v.nonNegative(lp+".connection_burst", int64(l.ConnectionBurst))
	v.nonNegative(lp+".max_connections_per_client_ip", int64(l.MaxConnectionsPerClientIP))
	if r := l.ConnectionRatePerClientIP; math.IsNaN(r) || r < 0 {
		v.errf(lp+".connection_rate_per_client_ip", "%g must be >= 0 (0 is unlimited)", r)
	}
	v.nonNegative(lp+".connection_burst_per_client_ip", int64(l.ConnectionBurstPerClientIP))
}

// limitScope checks a limit's scope: fleet needs the fleet's prefix and a
// limit to share.
func (v *validator) limitScope(path, scope string, set bool) {
	v.oneOf(path, scope, ScopeLocal, ScopeFleet)
	if scope != ScopeFleet {
		return
	}
	if v.c.Consul.Fleet.Prefix == "" {
		v.errf(path, "fleet needs consul.fleet.prefix, the Consul KV prefix the fleet shares")
	}
	if !set {
		v.warnf(path, "fleet scope of a limit that is 0 (unlimited): nothing to share")
	}
}

// health checks the active health checks.
func (v *validator) health(hp string, h Health) {
	v.oneOf(hp+".type", h.Type, HealthNone, HealthTCP, HealthHTTP, HealthWebSocket)
	v.duration(hp+".interval", h.Interval, false)
	v.duration(hp+".timeout", h.Timeout, false)
	if h.Timeout > h.Interval && h.Interval > 0 {
		v.errf(hp+".timeout", "%s is longer than interval %s: probes would overlap", h.Timeout, h.Interval)
	}
	if h.Rise < 1 {
		v.errf(hp+".rise", "%d must be at least 1", h.Rise)
	}
	if h.Fall < 1 {
		v.errf(hp+".fall", "%d must be at least 1", h.Fall)
	}
	if !strings.HasPrefix(h.Path, "/") || strings.ContainsFunc(h.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		v.errf(hp+".path", "%q must start with / and hold no spaces or control characters", h.Path)
	}
	if h.ExpectStatus < 100 || h.ExpectStatus > 599 {
		v.errf(hp+".expect_status", "%d is not an HTTP status (100..599)", h.ExpectStatus)
	}
	if h.Type == HealthNone && v.c.src.has(hp) && !v.c.src.has(hp+".type") {
		v.warnf(hp, "health.type is not set: no active checks run")
	}
}

// webSocket checks frame-aware splicing and the lingering close.
func (v *validator) webSocket(wp string, ws WebSocket) {
	v.nonNegative(wp+".max_frame_bytes", ws.MaxFrameBytes)
	v.duration(wp+".ping_interval", ws.PingInterval, true)
	v.duration(wp+".ping_timeout", ws.PingTimeout, true)
	v.nonNegative(wp+".max_message_bytes", ws.MaxMessageBytes)
	v.duration(wp+".linger", ws.Linger, true)
	if ws.LingerBytes <= 0 {
		v.errf(wp+".linger_bytes", "%d must be > 0", ws.LingerBytes)
	}
	if ws.PingTimeout > 0 && ws.PingInterval == 0 {
		v.errf(wp+".ping_timeout", "needs ping_interval: without pings a silent client is not a dead one")
	}
	v.oneOf(wp+".deflate", ws.Deflate, "", DeflatePass, DeflateStrip, DeflateLimit)
	if ws.Deflate == DeflateLimit && ws.MaxMessageBytes <= 0 {
		v.errf(wp+".deflate", "limit needs max_message_bytes: it counts messages inflated against it")
	}
	if b := ws.DeflateMaxWindowBits; b != 0 && (b < 9 || b > 15) {
		v.errf(wp+".deflate_max_window_bits", "%d must be 0 (no cap) or 9..15 (8 is refused by zlib-based peers)", b)
	}
	r, rp := ws.Rate, wp+".rate"
	for _, f := range []struct {
		key string
		v   float64
	}{{"messages_per_second", r.MessagesPerSecond}, {"message_burst", r.MessageBurst}, {"bytes_per_second", r.BytesPerSecond}, {"byte_burst", r.ByteBurst}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			v.errf(rp+"."+f.key, "%v must be a number >= 0", f.v)
		}
	}
	v.oneOf(rp+".action", r.Action, RateClose, RateSlow)
	if ws.Deflate == DeflateStrip && ws.DeflateMaxWindowBits != 0 {
		v.warnf(wp+".deflate_max_window_bits", "ignored: deflate is strip, nothing is compressed")
	}
}

func (v *validator) backendLeave(path string, bl BackendLeave) {
	v.oneOf(path+".connections", bl.Connections, LeaveDrain, LeaveKeep)
	v.duration(path+".window", bl.Window, true)
	if bl.Connections == LeaveKeep && v.c.src.has(path+".window") {
		v.warnf(path+".window", "ignored: connections is keep, not drain")
	}
}

func (v *validator) consul() {
	c := v.c.Consul
	v.consulAddress(c.Address)
	if c.Token != "" && c.TokenFile != "" {
		v.errf("consul.token_file", "set only one of token and token_file")
	} else if c.TokenFile != "" {
		if _, err := c.ACLToken(); err != nil {
			v.errf("consul.token_file", "%v", err)
		}
	}
	v.file("consul.ca_file", c.CAFile, false)
	v.consulRegister(c.Register)
	v.consulFleet(c.Fleet)
	for i, h := range c.Routes.AllowedHosts {
		if msg := checkHostPattern(h); msg != "" {
			v.errf(index("consul.routes.allowed_hosts", i), "%q %s", h, msg)
		}
	}
}

// consulFleet checks the fleet's prefix and the bounds of its load
// records.
func (v *validator) consulFleet(f ConsulFleet) {
	if f.Prefix != "" {
		v.consulKey("consul.fleet.prefix", f.Prefix)
	}
	if f.ID != "" && strings.Trim(f.ID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:") != "" {
		v.errf("consul.fleet.id", "%q: only letters, digits, '.', '_', '-' and ':'", f.ID)
	}
	if d := f.PublishEvery.Std(); d < 2*time.Second {
		v.errf("consul.fleet.publish_every", "%s: at least 2s (no edge writes its load more often)", d)
	}
	if d := f.SessionTTL.Std(); d < 10*time.Second || d > time.Hour {
		v.errf("consul.fleet.session_ttl", "%s: want 10s to 1h (Consul's bounds)", d)
	}
	if d := f.StaleAfter.Std(); d <= 5*time.Second {
		v.errf("consul.fleet.stale_after", "%s: want more than 5s, the blocking query's wait", d)
	}
}

// consulAddress accepts host:port or http(s)://host:port; "" is the default.
func (v *validator) consulAddress(a string) {
	if a == "" {
		return
	}
	if !strings.Contains(a, "://") {
		v.hostPort("consul.address", a, false)
		return
	}
	u, err := url.Parse(a)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		v.errf("consul.address", "%q must be host:port or http(s)://host:port", a)
		return
	}
	v.hostPort("consul.address", u.Host, false)
}

// consulRegister checks edge's own registration: both service names, and
// apart, so Prometheus never scrapes the public port.
func (v *validator) consulRegister(r ConsulRegister) {
	if !r.Enabled {
		return
	}
	if r.Service == "" {
		v.errf("consul.register.service", "required when register is enabled")
	}
	if r.MetricsService == "" {
		v.errf("consul.register.metrics_service", "required when register is enabled")
	}
	if r.MetricsService == r.Service {
		v.errf("consul.register.metrics_service", "%q is also consul.register.service; Prometheus would scrape the public port", r.MetricsService)
	}
}

// hostPort checks host:port. Listeners may leave the host empty (all
// interfaces) and use port 0 (any free port, for tests); backends and the
// Consul agent need both.
func (v *validator) hostPort(path, addr string, listen bool) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.errf(path, "%q is not host:port (IPv6 addresses go in brackets: [::1]:8443)", addr)
		return false
	}
	n, err := strconv.Atoi(port)
	lo := 1
	if listen {
		lo = 0
	}
	if err != nil || n < lo || n > 65535 {
		v.errf(path, "%q: port must be a number in %d..65535", addr, lo)
		return false
	}
	if host == "" {
		if !listen {
			v.errf(path, "%q has no host", addr)
			return false
		}
		return true
	}
	if _, err := netip.ParseAddr(host); err != nil && !isDNSName(host) {
		v.errf(path, "%q: %q is neither an IP address nor a host name", addr, host)
		return false
	}
	return true
}

func (v *validator) oneOf(path, got string, allowed ...string) {
	if slices.Contains(allowed, got) {
		return
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = strconv.Quote(a)
	}
	v.errf(path, "%q is not one of %s%s", got, strings.Join(quoted, ", "), suggest(got, allowed))
}

// consulKey checks a Consul KV path.
func (v *validator) consulKey(path, k string) {
	if strings.HasPrefix(k, "/") || len(k) > 512 || strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		v.errf(path, "%q is not a Consul KV path (no leading /, no spaces, at most 512 bytes)", k)
	}
}

// duration checks d > 0, or d >= 0 where zero has a documented meaning.
func (v *validator) duration(path string, d Duration, zeroOK bool) {
	switch {
	case d < 0:
		v.errf(path, "%s must not be negative", d)
	case d == 0 && !zeroOK:
		v.errf(path, "must be greater than 0")
	}
}

func (v *validator) nonNegative(path string, n int64) {
	if n < 0 {
		v.errf(path, "%d must be >= 0 (0 is unlimited)", n)
	}
}

// name checks a listener or pool name, which becomes a metrics label
// value and appears in logs.
func (v *validator) name(path, s string) {
	if len(s) > 64 || strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) {
		v.errf(path, "%q may hold only letters, digits, '_', '-' and '.', at most 64", s)
	}
}

// file checks that a referenced file exists and is a regular file; its
// content is the business of the component that reads it.
func (v *validator) file(path, name string, required bool) {
	if name == "" {
		if required {
			v.errf(path, "required")
		}
		return
	}
	if err := checkFile(name); err != nil {
		v.errf(path, "%v", err)
	}
}

// secretFile is file for a file that holds a secret (checkSecretFile).
func (v *validator) secretFile(path, name string, required bool) {
	if name == "" {
		if required {
			v.errf(path, "required")
		}
		return
	}
	if err := checkSecretFile(name); err != nil {
		v.errf(path, "%v", err)
	}
}

// isToken reports whether s is an RFC 7230 token (header and cookie names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// isID reports whether s can serve as a backend id.
func isID(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' {
			return false
		}
	}
	return true
}

// curves checks a listener's key exchanges: known names, no repeats.
func (v *validator) curves(path string, names []string) {
	seen := map[string]bool{}
	for i, n := range names {
		p := index(path, i)
		if _, ok := CurveNames[n]; !ok {
			v.errf(p, "%q is not a key exchange edge knows (X25519MLKEM768, SecP256r1MLKEM768, SecP384r1MLKEM1024, X25519, P-256, P-384, P-521)", n)
			continue
		}
		if seen[n] {
			v.errf(p, "%q is listed twice", n)
		}
		seen[n] = true
	}
}

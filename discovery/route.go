package discovery

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/hostname"
)

// Route declarations: a service can ask edge for a route of its own. The
// grammar (also in doc.go):
//
//	tags:  edge                       marker: "look at my meta" (optional with edge.* tags)
//	       edge.host=<host>[,<host>]  repeatable; exact names or "*.suffix" wildcards
//	       edge.path=<prefix>         path prefix, starts with "/"
//	       edge.sticky=<mode>         none | cookie | client_ip (none is least_conn)
//	       edge.max-conns=<n>         connection cap for the pool, integer >= 0
//	       edge.max-conns-per-client-ip=<n>  cap per client address, integer >= 0
//	       edge.health=<type>         edge's own active check: tcp | http | websocket
//	       edge.health-interval=<d>   between probes, a Go duration (100ms to 1h)
//	meta:  edge-route-host, edge-route-path, edge-route-sticky, ...
//	                                  the same keys (meta keys cannot hold dots)
//
// A declaration needs at least a host or a path: a service that only says
// edge.sticky=cookie must not become a catch-all route. Keys are
// case-insensitive, values are trimmed, hosts are put in canonical form
// (hostname.Pattern: lower case, no trailing dot), the same as the file's
// and the request's, so a collision is seen here and not only by the
// proxy. Unknown edge.*
// tags or edge-route-* meta keys are errors (a typo such as "edge.hots" should
// be visible, not silently ignored). A key given twice with different values,
// by tags or by tag and meta, is an error; hosts accumulate.
const (
	routeMarkerTag = "edge"
	routeTagPrefix = "edge."
	routeMetaPrefx = "edge-route-"

	// maxRouteHosts bounds one declaration; a registry entry is not a
	// place for thousands of names.
	maxRouteHosts = 64
)

// stickyNone is how a declaration says "not sticky": balance.LeastConn.
const stickyNone = "none"

// RouteDecl is a route declared by a Consul service.
type RouteDecl struct {
	// Service is the Consul service that declared it; set by RouteWatcher,
	// empty from ParseRouteDecl.
	Service string `json:"service"`
	// Hosts are canonical (hostname.Pattern) and sorted; empty means any
	// host.
	Hosts []string `json:"hosts,omitempty"`
	// PathPrefix starts with "/"; "/" when only hosts were declared.
	PathPrefix string `json:"path_prefix"`
	// Sticky is the pool's balance mode in balance's spelling
	// (balance.Mode.String: least_conn for a declared "none", cookie,
	// client_ip), or "" when not declared (the pool's default applies).
	Sticky string `json:"sticky,omitempty"`
	// MaxConns caps the pool's connections; 0 means not declared.
	MaxConns int64 `json:"max_conns,omitempty"`
	// MaxConnsPerClientIP caps one client address's connections to the
	// pool; 0 means not declared.
	MaxConnsPerClientIP int `json:"max_conns_per_client_ip,omitempty"`
	// Health is the type of edge's own active check of the pool's
	// backends, lower-cased and not checked here (the pool's settings
	// are, where they are built); "" means not declared.
	Health string `json:"health,omitempty"`
	// HealthInterval is the time between two probes of one backend; 0
	// means not declared.
	HealthInterval time.Duration `json:"health_interval,omitempty"`
	// Registered is the lowest Consul CreateIndex of the service's
	// instances: when the oldest of them entered the catalog. It orders
	// services that claim the same route (AdmitRoutes) and survives a
	// restart of edge. Set by RouteWatcher; 0 from ParseRouteDecl.
	Registered uint64 `json:"registered_index,omitempty"`
}

// Declared reports whether d declares a route at all.
func (d RouteDecl) Declared() bool { return len(d.Hosts) > 0 || d.PathPrefix != "" }

// Key identifies the route's whole match (hosts and path prefix).
func (d RouteDecl) Key() string { return strings.Join(d.Hosts, ",") + d.PathPrefix }

// Matches lists the (host, path prefix) pairs the route claims, as
// "host/prefix" ("/prefix" for any host). A file route, or an earlier
// service, claiming one of them takes precedence over the whole declaration.
func (d RouteDecl) Matches() []string {
	if len(d.Hosts) == 0 {
		return []string{d.PathPrefix}
	}
	out := make([]string, len(d.Hosts))
	for i, h := range d.Hosts {
		out[i] = h + d.PathPrefix
	}
	return out
}

// SamePool reports whether d and o ask for the same pool settings; a pool
// whose declaration changed them is built again.
func (d RouteDecl) SamePool(o RouteDecl) bool {
	return d.Sticky == o.Sticky && d.MaxConns == o.MaxConns && d.MaxConnsPerClientIP == o.MaxConnsPerClientIP &&
		d.Health == o.Health && d.HealthInterval == o.HealthInterval
}

func (d RouteDecl) equal(o RouteDecl) bool {
	if d.Service != o.Service || d.Registered != o.Registered || d.PathPrefix != o.PathPrefix || !d.SamePool(o) || len(d.Hosts) != len(o.Hosts) {
		return false
	}
	for i := range d.Hosts {
		if d.Hosts[i] != o.Hosts[i] {
			return false
		}
	}
	return true
}

// ParseRouteDecl reads a route declaration from a service's tags and meta. It
// returns the zero RouteDecl and a nil error when nothing is declared, and an
// error naming the offending key when the declaration is malformed. It never
// panics, whatever the input.
func ParseRouteDecl(tags []string, meta map[string]string) (RouteDecl, error) {
	p := declParser{set: map[string]string{}, src: map[string]string{}, seen: map[string]bool{}}
	for _, t := range tags {
		lt := strings.ToLower(strings.TrimSpace(t))
		if lt == routeMarkerTag || !strings.HasPrefix(lt, routeTagPrefix) {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(t)[len(routeTagPrefix):], "=")
		from := fmt.Sprintf("tag %q", t)
		if !ok {
			p.errs = append(p.errs, fmt.Errorf("%s: want edge.<key>=<value>", from))
			continue
		}
		p.add(strings.ToLower(strings.TrimSpace(k)), v, from)
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic error messages
	for _, k := range keys {
		lk := strings.ToLower(k)
		if !strings.HasPrefix(lk, routeMetaPrefx) {
			continue
		}
		p.add(lk[len(routeMetaPrefx):], meta[k], fmt.Sprintf("meta %q", k))
	}
	return p.decl()
}

// declParser collects one declaration's keys: hosts accumulate, every
// other key is taken once (routeKeys).
type declParser struct {
	d    RouteDecl
	errs []error
	set  map[string]string // key -> first value, for the keys of routeKeys
	src  map[string]string // key -> where that value came from
	seen map[string]bool   // hosts already in d.Hosts
}

// routeKeys are the declaration's single-valued keys and how each sets its
// field; they run in a fixed order (routeKeyOrder) so errors are
// deterministic.
var routeKeys = map[string]func(d *RouteDecl, v string) error{
	"path": func(d *RouteDecl, v string) (err error) {
		d.PathPrefix, err = parseRoutePath(v)
		return err
	},
	"sticky": func(d *RouteDecl, v string) error {
		s := strings.ToLower(v)
		if s == stickyNone {
			s = balance.LeastConn.String()
		}
		m, err := balance.ParseMode(s)
		if err != nil || s == "" {
			return fmt.Errorf("sticky %q: want none, cookie or client_ip", v)
		}
		d.Sticky = m.String()
		return nil
	},
	"max-conns": func(d *RouteDecl, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		d.MaxConns = max(n, 0)
		if err != nil || n < 0 {
			return fmt.Errorf("max-conns %q: want an integer >= 0", v)
		}
		return nil
	},
	"max-conns-per-client-ip": func(d *RouteDecl, v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		d.MaxConnsPerClientIP = int(max(n, 0))
		if err != nil || n < 0 {
			return fmt.Errorf("max-conns-per-client-ip %q: want an integer >= 0", v)
		}
		return nil
	},
	"health": func(d *RouteDecl, v string) error {
		s := strings.ToLower(v)
		if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < 'a' || r > 'z' }) {
			return fmt.Errorf("health %q: want tcp, http or websocket", v)
		}
		d.Health = s
		return nil
	},
	"health-interval": func(d *RouteDecl, v string) error {
		iv, err := time.ParseDuration(v)
		if err != nil || iv < minHealthInterval || iv > time.Hour {
			return fmt.Errorf("health-interval %q: want a duration from %s to 1h", v, minHealthInterval)
		}
		d.HealthInterval = iv
		return nil
	},
}

var routeKeyOrder = []string{"path", "sticky", "max-conns", "max-conns-per-client-ip", "health", "health-interval"}

// minHealthInterval bounds how often a declaration may have edge probe
// each backend.
const minHealthInterval = 100 * time.Millisecond

func (p *declParser) add(key, value, from string) {
	value = strings.TrimSpace(value)
	if key == "host" {
		for _, h := range strings.Split(value, ",") {
			h, err := parseRouteHost(h)
			if err != nil {
				p.errs = append(p.errs, fmt.Errorf("%s: %w", from, err))
				continue
			}
			if !p.seen[h] {
				p.seen[h] = true
				p.d.Hosts = append(p.d.Hosts, h)
			}
		}
		return
	}
	if routeKeys[key] == nil {
		p.errs = append(p.errs, fmt.Errorf("%s: unknown route key %q", from, key))
		return
	}
	if prev, ok := p.set[key]; ok && prev != value {
		p.errs = append(p.errs, fmt.Errorf("%s: conflicts with %s", from, p.src[key]))
		return
	}
	p.set[key], p.src[key] = value, from
}

// decl applies the single-valued keys and returns the declaration.
func (p *declParser) decl() (RouteDecl, error) {
	d := &p.d
	for _, k := range routeKeyOrder {
		v, ok := p.set[k]
		if !ok {
			continue
		}
		if err := routeKeys[k](d, v); err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: %w", p.src[k], err))
		}
	}
	if len(d.Hosts) > maxRouteHosts {
		p.errs = append(p.errs, fmt.Errorf("%d hosts, at most %d", len(d.Hosts), maxRouteHosts))
	}
	if err := errors.Join(p.errs...); err != nil {
		return RouteDecl{}, fmt.Errorf("route declaration: %w", err)
	}
	if !d.Declared() {
		if len(p.set) > 0 {
			return RouteDecl{}, errors.New("route declaration: needs edge.host or edge.path")
		}
		return RouteDecl{}, nil
	}
	if d.PathPrefix == "" {
		d.PathPrefix = "/"
	}
	sort.Strings(d.Hosts)
	return *d, nil
}

// parseRouteHost accepts a DNS name or "*.suffix", without port, and
// returns its canonical form.
func parseRouteHost(h string) (string, error) {
	h = strings.TrimSpace(h)
	c, err := hostname.Pattern(h)
	if err != nil {
		return "", fmt.Errorf("host %q: %w", h, err)
	}
	return c, nil
}

// parseRoutePath accepts an absolute path prefix of visible ASCII, without
// query, fragment or dot segments.
func parseRoutePath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || len(p) > 1024 {
		return "", fmt.Errorf("path %q: must start with / and be at most 1024 bytes", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '\\' {
			return "", fmt.Errorf("path %q: character %q not allowed", p, c)
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("path %q: dot segments not allowed", p)
		}
	}
	return p, nil
}

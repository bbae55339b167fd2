package discovery

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/edgelb/edge/internal/hostname"
)

// Route declarations: a service can ask edge for a route of its own. The
// grammar (also in doc.go):
//
//	tags:  edge                       marker: "look at my meta" (optional with edge.* tags)
//	       edge.host=<host>[,<host>]  repeatable; exact names or "*.suffix" wildcards
//	       edge.path=<prefix>         path prefix, starts with "/"
//	       edge.sticky=<mode>         none | cookie | client_ip
//	       edge.max-conns=<n>         connection cap for the pool, integer >= 0
//	meta:  edge-route-host, edge-route-path, edge-route-sticky,
//	       edge-route-max-conns       the same keys (meta keys cannot hold dots)
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

// Sticky modes a route may declare.
const (
	StickyNone     = "none"
	StickyCookie   = "cookie"
	StickyClientIP = "client_ip"
)

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
	// Sticky is StickyNone, StickyCookie, StickyClientIP, or "" when not
	// declared (the pool's default applies).
	Sticky string `json:"sticky,omitempty"`
	// MaxConns caps the pool's connections; 0 means not declared.
	MaxConns int64 `json:"max_conns,omitempty"`
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

func (d RouteDecl) equal(o RouteDecl) bool {
	if d.Service != o.Service || d.Registered != o.Registered || d.PathPrefix != o.PathPrefix || d.Sticky != o.Sticky || d.MaxConns != o.MaxConns || len(d.Hosts) != len(o.Hosts) {
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
	var (
		d    RouteDecl
		errs []error
		set  = map[string]string{} // key -> first value, for path/sticky/max-conns
		src  = map[string]string{}
		seen = map[string]bool{}
	)
	add := func(key, value, from string) {
		value = strings.TrimSpace(value)
		switch key {
		case "host":
			for _, h := range strings.Split(value, ",") {
				h, err := parseRouteHost(h)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", from, err))
					continue
				}
				if !seen[h] {
					seen[h] = true
					d.Hosts = append(d.Hosts, h)
				}
			}
		case "path", "sticky", "max-conns":
			if prev, ok := set[key]; ok && prev != value {
				errs = append(errs, fmt.Errorf("%s: conflicts with %s", from, src[key]))
				return
			}
			set[key], src[key] = value, from
		default:
			errs = append(errs, fmt.Errorf("%s: unknown route key %q", from, key))
		}
	}
	for _, t := range tags {
		lt := strings.ToLower(strings.TrimSpace(t))
		if lt == routeMarkerTag || !strings.HasPrefix(lt, routeTagPrefix) {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(t)[len(routeTagPrefix):], "=")
		from := fmt.Sprintf("tag %q", t)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: want edge.<key>=<value>", from))
			continue
		}
		add(strings.ToLower(strings.TrimSpace(k)), v, from)
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
		add(lk[len(routeMetaPrefx):], meta[k], fmt.Sprintf("meta %q", k))
	}

	if v, ok := set["path"]; ok {
		p, err := parseRoutePath(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src["path"], err))
		}
		d.PathPrefix = p
	}
	if v, ok := set["sticky"]; ok {
		switch s := strings.ToLower(v); s {
		case StickyNone, StickyCookie, StickyClientIP:
			d.Sticky = s
		default:
			errs = append(errs, fmt.Errorf("%s: sticky %q: want none, cookie or client_ip", src["sticky"], v))
		}
	}
	if v, ok := set["max-conns"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s: max-conns %q: want an integer >= 0", src["max-conns"], v))
		}
		d.MaxConns = max(n, 0)
	}
	if len(d.Hosts) > maxRouteHosts {
		errs = append(errs, fmt.Errorf("%d hosts, at most %d", len(d.Hosts), maxRouteHosts))
	}
	if err := errors.Join(errs...); err != nil {
		return RouteDecl{}, fmt.Errorf("route declaration: %w", err)
	}
	if !d.Declared() {
		if len(set) > 0 {
			return RouteDecl{}, errors.New("route declaration: needs edge.host or edge.path")
		}
		return RouteDecl{}, nil
	}
	if d.PathPrefix == "" {
		d.PathPrefix = "/"
	}
	sort.Strings(d.Hosts)
	return d, nil
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

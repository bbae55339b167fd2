package proxy

import (
	"errors"
	"fmt"
	"net"
	"path"
	"sort"
	"strings"
)

// routeTable is the immutable, compiled form of a route list. SetRoutes
// builds a new one and publishes it with one atomic store.
type routeTable struct {
	exact    map[string][]*Route // lower-case host -> routes, longest prefix first
	wildcard []wildcardRoutes    // longest suffix first
	anyHost  []*Route            // routes without Hosts, longest prefix first
	def      *Route
	pools    []*Pool
}

type wildcardRoutes struct {
	suffix string // ".example.com"
	routes []*Route
}

// compileRoutes validates routes and builds the lookup table.
func compileRoutes(routes []Route) (*routeTable, error) {
	t := &routeTable{exact: map[string][]*Route{}}
	var errs []error
	wild := map[string][]*Route{}
	seen := map[string]bool{}
	poolSeen := map[*Pool]bool{}
	for i := range routes {
		r := &routes[i]
		rc := *r // keep our own copy: callers may reuse their slice
		r = &rc
		if r.Pool == nil || r.Pool.Balancer == nil {
			errs = append(errs, fmt.Errorf("route %d: pool or its balancer is nil", i))
			continue
		}
		if !poolSeen[r.Pool] {
			poolSeen[r.Pool] = true
			t.pools = append(t.pools, r.Pool)
		}
		if r.PathPrefix != "" && r.PathPrefix[0] != '/' {
			errs = append(errs, fmt.Errorf("route %d: path prefix %q does not start with /", i, r.PathPrefix))
			continue
		}
		if r.Default {
			if t.def != nil {
				errs = append(errs, fmt.Errorf("route %d: more than one default route", i))
				continue
			}
			t.def = r
			if len(r.Hosts) == 0 {
				continue
			}
		}
		if len(r.Hosts) == 0 {
			key := "\x00" + r.PathPrefix
			if seen[key] {
				errs = append(errs, fmt.Errorf("route %d: duplicate route for any host and prefix %q", i, r.PathPrefix))
				continue
			}
			seen[key] = true
			t.anyHost = append(t.anyHost, r)
			continue
		}
		for _, h := range r.Hosts {
			h = strings.TrimSuffix(strings.ToLower(h), ".")
			key := h + "\x00" + r.PathPrefix
			if seen[key] {
				errs = append(errs, fmt.Errorf("route %d: duplicate route for host %q and prefix %q", i, h, r.PathPrefix))
				continue
			}
			seen[key] = true
			switch {
			case strings.HasPrefix(h, "*."):
				suffix := h[1:]
				if len(suffix) < 2 || strings.Contains(suffix, "*") {
					errs = append(errs, fmt.Errorf("route %d: invalid host pattern %q", i, h))
					continue
				}
				wild[suffix] = append(wild[suffix], r)
			case h == "" || strings.Contains(h, "*"):
				errs = append(errs, fmt.Errorf("route %d: invalid host %q (wildcards only as a leading \"*.\")", i, h))
			default:
				t.exact[h] = append(t.exact[h], r)
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("proxy routes: %w", errors.Join(errs...))
	}
	for _, rs := range t.exact {
		sortByPrefix(rs)
	}
	for suffix, rs := range wild {
		sortByPrefix(rs)
		t.wildcard = append(t.wildcard, wildcardRoutes{suffix: suffix, routes: rs})
	}
	sort.Slice(t.wildcard, func(i, j int) bool {
		a, b := t.wildcard[i].suffix, t.wildcard[j].suffix
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	sortByPrefix(t.anyHost)
	return t, nil
}

func sortByPrefix(rs []*Route) {
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].PathPrefix) > len(rs[j].PathPrefix) })
}

// match finds the route for a request: exact host first, then the most
// specific wildcard, then host-less routes, each by longest path prefix,
// then the default route. It returns nil when nothing matches.
func (t *routeTable) match(host, reqPath string) *Route {
	host = normalizeHost(host)
	p := cleanPath(reqPath)
	if r := matchPrefix(t.exact[host], p); r != nil {
		return r
	}
	for _, w := range t.wildcard {
		// "*.example.com" matches one or more labels below example.com,
		// never example.com itself.
		if len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) {
			if r := matchPrefix(w.routes, p); r != nil {
				return r
			}
		}
	}
	if r := matchPrefix(t.anyHost, p); r != nil {
		return r
	}
	return t.def
}

func matchPrefix(rs []*Route, p string) *Route {
	for _, r := range rs {
		if prefixMatches(r.PathPrefix, p) {
			return r
		}
	}
	return nil
}

// prefixMatches matches on path-segment boundaries: "/chat" matches "/chat"
// and "/chat/x" but not "/chatroom"; a prefix ending in "/" matches anything
// below it. This keeps one application's prefix from capturing another's.
func prefixMatches(prefix, p string) bool {
	if prefix == "" || prefix == "/" {
		return true
	}
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || prefix[len(prefix)-1] == '/' || p[len(prefix)] == '/'
}

// normalizeHost lower-cases the host, strips a port and a trailing dot.
func normalizeHost(h string) string {
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// cleanPath routes on the cleaned path so "/a/../b" cannot reach b's pool
// through a's prefix; the backend still receives the request URI unchanged.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	if !strings.Contains(p, "/.") && !strings.Contains(p, "//") {
		return p
	}
	c := path.Clean(p)
	if p[len(p)-1] == '/' && c != "/" {
		c += "/"
	}
	return c
}

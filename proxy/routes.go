package proxy

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/edgelb/edge/internal/hostname"
)

// routeTable is the immutable, compiled form of a route list. SetRoutes
// builds a new one and publishes it with one atomic store.
//
// Routes come in two tiers: the file's (the operator's) and those declared
// in the registry (Route.Declared). A request is matched against the file's
// routes first, whole; the declared ones are tried only for a host that no
// file route names, exactly or by a wildcard; the default route comes last.
// So a declared route can never take a host the file routes, any path under
// it, a path the file routes for any host, or a request the file's routes
// would take, whatever the registry says (see discovery.AdmitRoutes, which
// refuses such declarations before they get here).
type routeTable struct {
	file     hostTable
	declared hostTable
	def      *route
	// pools are the compiled pools the routes send to, one per *Pool
	// whatever the number of routes naming it.
	pools []*pool
	// dropped lists declared routes that did not compile; they never
	// make SetRoutes fail, so a registry can never block the file's
	// routes or a reload.
	dropped []string
}

// hostTable is one tier of routes.
type hostTable struct {
	exact    map[string][]*route // canonical host -> routes, longest prefix first
	wildcard []wildcardRoutes    // longest suffix first
	anyHost  []*route            // routes without Hosts, longest prefix first
	wild     map[string][]*route // suffix -> routes, while compiling
	seen     map[string]bool     // host + "\x00" + prefix, while compiling
}

type wildcardRoutes struct {
	suffix string // ".example.com"
	routes []*route
}

// route is a Route compiled: what matching and the data path read of it.
type route struct {
	prefix string // "" or "/": every path
	pool   *pool
}

// compileRoutes validates routes and builds the lookup table. A bad file
// route is an error; a bad declared route is left out (routeTable.dropped).
func compileRoutes(routes []Route) (*routeTable, error) {
	t := &routeTable{}
	t.file.init()
	t.declared.init()
	var errs []error
	compiled := map[*Pool]*pool{}
	for i := range routes {
		r := &routes[i] // read here, never kept: callers may reuse their slice
		if r.Pool == nil || r.Pool.Balancer == nil {
			errs = append(errs, fmt.Errorf("route %d: pool or its balancer is nil", i))
			continue
		}
		p := compiled[r.Pool]
		if p == nil {
			p = compilePool(r.Pool)
			compiled[r.Pool] = p
			t.pools = append(t.pools, p)
		}
		rerrs := t.place(i, r, &route{prefix: r.PathPrefix, pool: p})
		if r.Declared {
			for _, err := range rerrs {
				t.dropped = append(t.dropped, err.Error())
			}
			continue
		}
		errs = append(errs, rerrs...)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("proxy routes: %w", errors.Join(errs...))
	}
	t.file.finish()
	t.declared.finish()
	return t, nil
}

// place puts route i into its tier (and is the default route when it
// says so); what is wrong with it is returned, and that part left out.
func (t *routeTable) place(i int, r *Route, cr *route) []error {
	switch {
	case r.PathPrefix != "" && r.PathPrefix[0] != '/':
		return []error{fmt.Errorf("route %d: path prefix %q does not start with /", i, r.PathPrefix)}
	case r.Default && r.Declared:
		return []error{fmt.Errorf("route %d: a declared route cannot be the default route", i)}
	case r.Default && t.def != nil:
		return []error{fmt.Errorf("route %d: more than one default route", i)}
	case r.Default:
		t.def = cr
		if len(r.Hosts) > 0 {
			return t.file.add(i, r.Hosts, cr)
		}
		return nil
	case r.Declared:
		return t.declared.add(i, r.Hosts, cr)
	default:
		return t.file.add(i, r.Hosts, cr)
	}
}

func (h *hostTable) init() {
	h.exact, h.wild, h.seen = map[string][]*route{}, map[string][]*route{}, map[string]bool{}
}

// add puts route i, for hosts, into the tier; a host of it that is bad
// or already routed with the same prefix is an error (and left out).
func (h *hostTable) add(i int, hosts []string, r *route) []error {
	if len(hosts) == 0 {
		key := "\x00" + r.prefix
		if h.seen[key] {
			return []error{fmt.Errorf("route %d: duplicate route for any host and prefix %q", i, r.prefix)}
		}
		h.seen[key] = true
		h.anyHost = append(h.anyHost, r)
		return nil
	}
	var errs []error
	for _, host := range hosts {
		host = hostname.Canonical(host)
		key := host + "\x00" + r.prefix
		if h.seen[key] {
			errs = append(errs, fmt.Errorf("route %d: duplicate route for host %q and prefix %q", i, host, r.prefix))
			continue
		}
		h.seen[key] = true
		switch {
		case strings.HasPrefix(host, "*."):
			suffix := host[1:]
			if len(suffix) < 2 || strings.Contains(suffix, "*") {
				errs = append(errs, fmt.Errorf("route %d: invalid host pattern %q", i, host))
				continue
			}
			h.wild[suffix] = append(h.wild[suffix], r)
		case host == "" || strings.Contains(host, "*"):
			errs = append(errs, fmt.Errorf("route %d: invalid host %q (wildcards only as a leading \"*.\")", i, host))
		default:
			h.exact[host] = append(h.exact[host], r)
		}
	}
	return errs
}

func (h *hostTable) finish() {
	for _, rs := range h.exact {
		sortByPrefix(rs)
	}
	for suffix, rs := range h.wild {
		sortByPrefix(rs)
		h.wildcard = append(h.wildcard, wildcardRoutes{suffix: suffix, routes: rs})
	}
	sort.Slice(h.wildcard, func(i, j int) bool {
		a, b := h.wildcard[i].suffix, h.wildcard[j].suffix
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	sortByPrefix(h.anyHost)
	h.wild, h.seen = nil, nil
}

func sortByPrefix(rs []*route) {
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].prefix) > len(rs[j].prefix) })
}

// match finds the route for a request: the file's routes first (exact
// host, then the most specific wildcard, then host-less routes, each by
// longest path prefix), then, for a host the file does not name, the
// declared routes in the same order, then the default route. It returns nil
// when nothing matches.
func (t *routeTable) match(host, reqPath string) *route {
	host = hostname.Request(host)
	p := cleanPath(reqPath)
	if r := t.file.match(host, p); r != nil {
		return r
	}
	if !t.file.names(host) {
		if r := t.declared.match(host, p); r != nil {
			return r
		}
	}
	return t.def
}

func (h *hostTable) match(host, p string) *route {
	if r := matchPrefix(h.exact[host], p); r != nil {
		return r
	}
	for _, w := range h.wildcard {
		if wildcardMatches(w.suffix, host) {
			if r := matchPrefix(w.routes, p); r != nil {
				return r
			}
		}
	}
	return matchPrefix(h.anyHost, p)
}

// names reports whether a route of the tier names host, exactly or by a
// wildcard, whatever its path.
func (h *hostTable) names(host string) bool {
	if len(h.exact[host]) > 0 {
		return true
	}
	for _, w := range h.wildcard {
		if wildcardMatches(w.suffix, host) {
			return true
		}
	}
	return false
}

// wildcardMatches: "*.example.com" (suffix ".example.com") matches one or
// more labels below example.com, never example.com itself.
func wildcardMatches(suffix, host string) bool {
	return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
}

func matchPrefix(rs []*route, p string) *route {
	for _, r := range rs {
		if prefixMatches(r.prefix, p) {
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

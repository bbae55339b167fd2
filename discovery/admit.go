package discovery

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/edgelb/edge/internal/hostname"
)

// RoutePolicy is what the configuration file lets the registry claim. The
// zero value admits nothing: declared routes are off unless the file turns
// them on, as with Traefik's exposedByDefault: false, because more people
// can register a service than can edit the file.
type RoutePolicy struct {
	// AllowedHosts are canonical host patterns (hostname.Pattern); a
	// declaration may claim a host only when one of them covers it
	// (hostname.Covers).
	AllowedHosts []string
	// AllowAnyHost admits declarations without a host. They match any
	// host the file does not route, ahead of the file's default route.
	AllowAnyHost bool
	// File are the file's routes other than the default one.
	File []FileRoute
}

// FileRoute is a route of the configuration file, as far as the policy
// needs it.
type FileRoute struct {
	Hosts      []string // canonical patterns; empty means any host
	PathPrefix string
}

// RouteRefusal is a declaration AdmitRoutes did not admit, and why.
type RouteRefusal struct {
	Service    string `json:"service"`
	Route      string `json:"route"` // RouteDecl.Key
	Registered uint64 `json:"registered_index,omitempty"`
	Reason     string `json:"reason"`
}

// String is the refusal as one log or status line.
func (r RouteRefusal) String() string {
	return fmt.Sprintf("service %q route %s: %s", r.Service, r.Route, r.Reason)
}

// AdmitRoutes decides which declarations get a route. A declaration is
// admitted or refused whole. It is refused when:
//
//   - it names no host and the policy does not allow that;
//   - one of its hosts is not covered by AllowedHosts;
//   - one of its hosts is routed by the file: equal to a file host, or
//     covered by a file wildcard (so a declaration never takes a file host,
//     nor any path under it);
//   - its path prefix lies under a prefix the file routes for any host
//     (the file's route would take every request it could get);
//   - a host and path prefix it claims is already claimed by a declaration
//     admitted before it.
//
// Declarations are considered in an order a service cannot improve by
// choosing its name: first those that hold the same route in held (the
// routes admitted last time, so a holder keeps its route while it declares
// it, whatever happens to the others), then by Registered (the oldest
// registration in the catalog first), and only between equal indexes by
// service name. A declared wildcard that overlaps a file host is admitted,
// but the proxy still gives every host the file routes to the file's routes.
//
// The result is sorted as RouteWatcher sorts; refusals are sorted by
// service. AdmitRoutes is a pure function: the same input gives the same
// answer, on every edge of a fleet.
func AdmitRoutes(decls []RouteDecl, policy RoutePolicy, held []RouteDecl) ([]RouteDecl, []RouteRefusal) {
	holds := make(map[string]string, len(held)) // service -> route key
	for _, h := range held {
		holds[h.Service] = h.Key()
	}
	order := slices.Clone(decls)
	slices.SortStableFunc(order, func(a, b RouteDecl) int {
		ha, hb := holds[a.Service] == a.Key(), holds[b.Service] == b.Key()
		if ha != hb {
			if ha {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Registered, b.Registered), cmp.Compare(a.Service, b.Service))
	})
	var (
		out     []RouteDecl
		refused []RouteRefusal
		owner   = map[string]RouteDecl{} // "host prefix" -> admitted declaration
	)
	for _, d := range order {
		reason := policy.refuse(d)
		if reason == "" {
			for _, m := range claims(d) {
				if o, ok := owner[m]; ok {
					reason = fmt.Sprintf("%s is already claimed by service %q (registered at index %d, this one at %d)",
						strings.Replace(m, " ", "", 1), o.Service, o.Registered, d.Registered)
					break
				}
			}
		}
		if reason != "" {
			refused = append(refused, RouteRefusal{Service: d.Service, Route: d.Key(), Registered: d.Registered, Reason: reason})
			continue
		}
		for _, m := range claims(d) {
			owner[m] = d
		}
		out = append(out, d)
	}
	sortRoutes(out)
	slices.SortFunc(refused, func(a, b RouteRefusal) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Route, b.Route))
	})
	return out, refused
}

// claims lists the (host, prefix) pairs of d with hosts in canonical form,
// so two spellings of one host always collide here.
func claims(d RouteDecl) []string {
	if len(d.Hosts) == 0 {
		return []string{" " + d.PathPrefix}
	}
	out := make([]string, len(d.Hosts))
	for i, h := range d.Hosts {
		out[i] = hostname.Canonical(h) + " " + d.PathPrefix
	}
	return out
}

// refuse returns why the policy refuses d, or "".
func (p RoutePolicy) refuse(d RouteDecl) string {
	if len(d.Hosts) == 0 && !p.AllowAnyHost {
		return "declares no host, and consul.routes.allow_any_host is off"
	}
	for _, h := range d.Hosts {
		h = hostname.Canonical(h)
		if !slices.ContainsFunc(p.AllowedHosts, func(a string) bool { return hostname.Covers(hostname.Canonical(a), h) }) {
			if len(p.AllowedHosts) == 0 {
				return fmt.Sprintf("host %q: consul.routes.allowed_hosts is empty, so no declared host is allowed", h)
			}
			return fmt.Sprintf("host %q is not in consul.routes.allowed_hosts", h)
		}
		for _, f := range p.File {
			for _, fh := range f.Hosts {
				if hostname.Covers(hostname.Canonical(fh), h) {
					return fmt.Sprintf("host %q is routed by the file (%s)", h, fh)
				}
			}
		}
	}
	for _, f := range p.File {
		if len(f.Hosts) == 0 && pathCovers(f.PathPrefix, d.PathPrefix) {
			return fmt.Sprintf("path %q is routed by the file for any host (path_prefix %q)", d.PathPrefix, f.PathPrefix)
		}
	}
	return ""
}

// pathCovers reports whether every path under prefix b is also under
// prefix a, by the proxy's rule of matching on segment boundaries ("/chat"
// covers "/chat" and "/chat/x", not "/chatroom").
func pathCovers(a, b string) bool {
	if a == "" || a == "/" {
		return true
	}
	if !strings.HasPrefix(b, a) {
		return false
	}
	return len(b) == len(a) || a[len(a)-1] == '/' || b[len(a)] == '/'
}

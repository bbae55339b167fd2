package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// RouteWatcherOptions configure a RouteWatcher.
type RouteWatcherOptions struct {
	Client     *api.Client // required
	Datacenter string
	// OnChange receives the full, sorted list of declared routes after the
	// first successful listing and whenever it changes: every service's
	// valid declaration, overlapping or not. Which of them get a route is
	// AdmitRoutes' decision, under the file's RoutePolicy. It runs on Run's
	// goroutine and should not block for long. Required.
	OnChange func([]RouteDecl)
	// WaitTime, MinBackoff and MaxBackoff as in WatcherOptions.
	WaitTime, MinBackoff, MaxBackoff time.Duration
	Logger                           *slog.Logger
}

// RouteStatus is a point-in-time view of a RouteWatcher.
type RouteStatus struct {
	// Routes counts the valid declarations, admitted or not (see
	// AdmitRoutes for which get a route).
	Routes      int       `json:"routes"`
	LastIndex   uint64    `json:"last_index"`
	LastContact time.Time `json:"last_contact"`
	LastError   string    `json:"last_error,omitempty"`
	// Warnings lists malformed declarations and services whose instances
	// disagree, one per line; those declarations are ignored (a service
	// keeps its previous valid declaration, if it had one).
	Warnings []string `json:"warnings,omitempty"`
}

// RouteWatcher follows the catalog for services that declare routes (see
// ParseRouteDecl) and reports the declared routes.
type RouteWatcher struct {
	opts RouteWatcherOptions

	// Owned by Run's goroutine.
	index uint64
	prev  map[string]RouteDecl // service -> last valid declaration
	sent  []RouteDecl
	once  bool

	mu     sync.Mutex
	status RouteStatus
}

// NewRouteWatcher validates opts and fills defaults.
func NewRouteWatcher(opts RouteWatcherOptions) (*RouteWatcher, error) {
	if opts.Client == nil {
		return nil, errors.New("discovery: route watcher: consul client is required")
	}
	if opts.OnChange == nil {
		return nil, errors.New("discovery: route watcher: OnChange is required")
	}
	consul.Follow(&opts.WaitTime, &opts.MinBackoff, &opts.MaxBackoff, &opts.Logger, nil)
	return &RouteWatcher{opts: opts, prev: map[string]RouteDecl{}}, nil
}

// Status returns the current status. Safe for concurrent use.
func (r *RouteWatcher) Status() RouteStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	s.Warnings = append([]string(nil), s.Warnings...)
	return s
}

// Run follows the catalog until ctx ends, when it returns nil. Errors are
// retried with backoff and never change the reported routes.
func (r *RouteWatcher) Run(ctx context.Context) error {
	bo := consul.NewBackoff(r.opts.MinBackoff, r.opts.MaxBackoff)
	for ctx.Err() == nil {
		if err := r.round(ctx); err != nil {
			if ctx.Err() != nil {
				break
			}
			r.mu.Lock()
			first := r.status.LastError == ""
			r.status.LastError = err.Error()
			r.mu.Unlock()
			if first {
				r.opts.Logger.Warn("discovery: route listing failed; keeping current routes", "err", err)
			}
			r.index = 0 // see Watcher.Run
			if !consul.Sleep(ctx, bo.Next()) {
				break
			}
			continue
		}
		bo.Reset()
	}
	return nil
}

func (r *RouteWatcher) round(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("discovery: route watcher: panic: %v", p)
		}
	}()
	wait := r.opts.WaitTime
	qctx, cancel := context.WithTimeout(ctx, wait+wait/16+10*time.Second)
	defer cancel()
	q := (&api.QueryOptions{WaitIndex: r.index, WaitTime: wait, Datacenter: r.opts.Datacenter}).WithContext(qctx)
	services, meta, err := r.opts.Client.Catalog().Services(q)
	if err != nil {
		return fmt.Errorf("discovery: route watcher: list services: %w", err)
	}
	next, changed := consul.NextIndex(r.index, meta.LastIndex)
	if !changed && r.once {
		r.index = next
		r.contact(meta.LastIndex)
		return nil
	}

	// The listing carries only the union of tags; read the instances of
	// candidate services for their tags and meta.
	var names []string
	for name, tags := range services {
		if declaresRoute(tags) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var warns []string
	decls := map[string]RouteDecl{}
	for _, name := range names {
		iq := (&api.QueryOptions{Datacenter: r.opts.Datacenter}).WithContext(qctx)
		insts, _, err := r.opts.Client.Catalog().Service(name, "", iq)
		if err != nil {
			return fmt.Errorf("discovery: route watcher: read service %q: %w", name, err)
		}
		d, ok, w := serviceDecl(name, insts)
		warns = append(warns, w...)
		if !ok {
			if old, had := r.prev[name]; had {
				d = old // malformed now: keep the last valid declaration
			} else {
				continue
			}
		}
		if d.Declared() {
			decls[name] = d
		}
	}
	routes := make([]RouteDecl, 0, len(decls))
	for _, d := range decls {
		routes = append(routes, d)
	}
	sortRoutes(routes)

	r.index = next
	r.prev = decls
	r.contact(meta.LastIndex)
	r.mu.Lock()
	if len(warns) > 0 && strings.Join(warns, "\n") != strings.Join(r.status.Warnings, "\n") {
		r.opts.Logger.Warn("discovery: ignoring route declarations", "problems", strings.Join(warns, "; "))
	}
	r.status.Warnings = warns
	r.status.Routes = len(routes)
	r.mu.Unlock()
	if !r.once || !sameRoutes(routes, r.sent) {
		r.once = true
		r.sent = routes
		r.opts.Logger.Info("discovery: declared routes", "routes", len(routes))
		r.opts.OnChange(append([]RouteDecl(nil), routes...))
	}
	return nil
}

func (r *RouteWatcher) contact(index uint64) {
	r.mu.Lock()
	r.status.LastIndex = index
	r.status.LastContact = time.Now()
	r.status.LastError = ""
	r.mu.Unlock()
}

// declaresRoute reports whether a service's tags mark it as a candidate.
// Meta-only declarations need the tag "edge", since the catalog listing
// carries tags but not meta.
func declaresRoute(tags []string) bool {
	for _, t := range tags {
		lt := strings.ToLower(strings.TrimSpace(t))
		if lt == routeMarkerTag || strings.HasPrefix(lt, routeTagPrefix) {
			return true
		}
	}
	return false
}

// serviceDecl combines the declarations of a service's instances. Instances
// that declare nothing abstain; malformed ones are ignored with a warning;
// the rest must agree, or the service's declaration is unusable (ok false).
// The declaration's Registered is the lowest CreateIndex of all the
// service's instances: the catalog's own record of when the service
// arrived, which a newcomer cannot choose.
func serviceDecl(name string, insts []*api.CatalogService) (RouteDecl, bool, []string) {
	var (
		warns []string
		got   *RouteDecl
		bad   bool
	)
	var registered uint64
	for _, in := range insts {
		if in == nil {
			continue
		}
		if registered == 0 || in.CreateIndex < registered {
			registered = in.CreateIndex
		}
		d, err := ParseRouteDecl(in.ServiceTags, in.ServiceMeta)
		if err != nil {
			warns = append(warns, fmt.Sprintf("service %q instance %s/%s: %v", name, in.Node, in.ServiceID, err))
			bad = true
			continue
		}
		if !d.Declared() {
			continue
		}
		d.Service = name
		if got == nil {
			got = &d
		} else if !got.equal(d) {
			warns = append(warns, fmt.Sprintf("service %q: instances declare different routes (%s vs %s)", name, got.Key(), d.Key()))
			return RouteDecl{}, false, warns
		}
	}
	if got == nil {
		return RouteDecl{}, !bad, warns
	}
	got.Registered = registered
	return *got, true, warns
}

func sortRoutes(r []RouteDecl) {
	sort.Slice(r, func(i, j int) bool {
		if ki, kj := r[i].Key(), r[j].Key(); ki != kj {
			return ki < kj
		}
		return r[i].Service < r[j].Service
	})
}

func sameRoutes(a, b []RouteDecl) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].equal(b[i]) {
			return false
		}
	}
	return true
}

package discovery

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
)

// DeclaredPool is one pool built for a service's route declaration by the
// owner of DeclaredPools (cmd/edge: a balance pool, its watcher and its
// checker).
type DeclaredPool interface {
	// Run runs the pool's loops until ctx ends. What the registry
	// declares never stops edge, so it returns nothing: failures are the
	// pool's to log.
	Run(ctx context.Context)
}

// PoolHost is what DeclaredPools needs of its owner, which knows how a
// declaration becomes a running pool.
type PoolHost[P DeclaredPool] interface {
	// Policy is what the running file lets the registry claim.
	Policy() RoutePolicy
	// NewPool builds the pool decl asks for, without running it.
	NewPool(decl RouteDecl) (P, error)
	// Removed says that p, whose declaration went away, was refused or
	// now asks for another pool, has stopped for good.
	Removed(p P)
	// Changed is called after every reconcile: the admitted routes, and
	// the set of pools, may have changed.
	Changed()
}

// DeclaredPoolsOptions configures NewDeclaredPools.
type DeclaredPoolsOptions[P DeclaredPool] struct {
	Host   PoolHost[P]
	Logger *slog.Logger // nil: slog.Default()
}

// Admitted is one admitted declaration with its running pool.
type Admitted[P DeclaredPool] struct {
	Decl RouteDecl
	Pool P
}

// DeclaredPools keeps one running pool per admitted route declaration: a
// declaration the policy admits gets its pool started, one that goes away,
// is refused, or asks for another pool (RouteDecl.SamePool) has its pool
// stopped, and one that only changed its routes keeps its pool. Each new
// refusal is logged once. It follows the registry through SetDeclared (a
// RouteWatcher's OnChange) and the file through Reconcile (after a reload);
// nothing the registry says can make either fail.
type DeclaredPools[P DeclaredPool] struct {
	host PoolHost[P]
	log  *slog.Logger

	// reconcileMu serialises reconcile: a registry change and a reload
	// may both ask for one.
	reconcileMu sync.Mutex

	mu       sync.Mutex
	ctx      context.Context // Run's; nil before Run, and no pool starts
	started  chan struct{}   // closed once Run set ctx
	all      []RouteDecl     // every valid declaration, as the registry last said
	refused  []RouteRefusal  // of all, what the policy or an older claim refused
	logged   map[string]bool // refusals already logged
	declared map[string]*declared[P]
	wg       sync.WaitGroup // the running pools' goroutines, owned by Run
}

// declared is the running pool of one service's declaration.
type declared[P DeclaredPool] struct {
	decl   RouteDecl
	pool   P
	cancel context.CancelFunc
	done   chan struct{} // closed when pool.Run returned
}

// NewDeclaredPools returns a DeclaredPools with no declarations; pools
// start once Run runs.
func NewDeclaredPools[P DeclaredPool](opts DeclaredPoolsOptions[P]) *DeclaredPools[P] {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &DeclaredPools[P]{host: opts.Host, log: log, started: make(chan struct{}), declared: map[string]*declared[P]{}}
}

// Run starts the pools of what is admitted so far, and keeps following
// changes until ctx ends; it then stops every pool and returns once they
// have all stopped. Call it once.
func (d *DeclaredPools[P]) Run(ctx context.Context) error {
	d.mu.Lock()
	d.ctx = ctx
	d.mu.Unlock()
	close(d.started)
	d.Reconcile()
	<-ctx.Done()
	d.mu.Lock()
	list := make([]*declared[P], 0, len(d.declared))
	for svc, dp := range d.declared {
		list = append(list, dp)
		delete(d.declared, svc)
	}
	d.mu.Unlock()
	for _, dp := range list {
		dp.cancel()
	}
	d.wg.Wait()
	return nil
}

// Started is closed once Run follows changes: from then on an admitted
// declaration gets its pool.
func (d *DeclaredPools[P]) Started() <-chan struct{} { return d.started }

// SetDeclared takes the registry's current valid declarations (the whole
// set, as RouteWatcherOptions.OnChange gives it) and reconciles.
func (d *DeclaredPools[P]) SetDeclared(decls []RouteDecl) {
	d.mu.Lock()
	d.all = decls
	d.mu.Unlock()
	d.Reconcile()
}

// admit applies policy to the declarations; the routes that run now are
// the holders (see AdmitRoutes). d.mu is held.
func (d *DeclaredPools[P]) admit(policy RoutePolicy) ([]RouteDecl, []RouteRefusal) {
	held := make([]RouteDecl, 0, len(d.declared))
	for _, dp := range d.declared {
		held = append(held, dp.decl)
	}
	return AdmitRoutes(d.all, policy, held)
}

// Reconcile brings the pools in line with what the host's current policy
// admits of the registry's declarations, logs each new refusal once, and
// tells the host. It runs after every registry change; the owner calls it
// after every reload.
func (d *DeclaredPools[P]) Reconcile() {
	d.reconcileMu.Lock()
	defer d.reconcileMu.Unlock()
	// The host's lock comes before ours (Admitted runs under it), so its
	// policy is read first.
	policy := d.host.Policy()
	want, stop := d.settle(policy)
	for _, dp := range stop {
		dp.cancel()
		<-dp.done
		d.host.Removed(dp.pool)
	}
	for _, dc := range want {
		d.start(dc)
	}
	d.host.Changed()
}

// settle applies policy: it records and logs the refusals, takes the pools
// that must stop out of the set, updates the routes of those kept, and
// returns the admitted declarations by service, sorted, and the pools to
// stop.
func (d *DeclaredPools[P]) settle(policy RoutePolicy) ([]RouteDecl, []*declared[P]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	admitted, refused := d.admit(policy)
	d.refused = refused
	logged := make(map[string]bool, len(refused))
	for _, r := range refused {
		key := r.String()
		if !d.logged[key] {
			d.log.Warn("declared route refused", "service", r.Service, "route", r.Route, "reason", r.Reason)
		}
		logged[key] = true
	}
	d.logged = logged
	want := map[string]RouteDecl{}
	for _, dc := range admitted {
		want[dc.Service] = dc
	}
	var stop []*declared[P]
	for svc, dp := range d.declared {
		if w, ok := want[svc]; !ok || !w.SamePool(dp.decl) {
			stop = append(stop, dp)
			delete(d.declared, svc)
		} else {
			dp.decl = w
		}
	}
	out := make([]RouteDecl, 0, len(want))
	for _, dc := range want {
		out = append(out, dc)
	}
	slices.SortFunc(out, func(a, b RouteDecl) int { return cmp.Compare(a.Service, b.Service) })
	return out, stop
}

// start builds and runs the pool of dc unless it runs already or Run is
// not (or no longer) running.
func (d *DeclaredPools[P]) start(dc RouteDecl) {
	d.mu.Lock()
	_, have := d.declared[dc.Service]
	ctx := d.ctx
	d.mu.Unlock()
	if have || ctx == nil || ctx.Err() != nil {
		return
	}
	p, err := d.host.NewPool(dc)
	if err != nil {
		d.log.Warn("declared route ignored", "service", dc.Service, "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Run's stop takes the set under d.mu: a pool is either in the set it
	// stops or never started.
	if ctx.Err() != nil {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	dp := &declared[P]{decl: dc, pool: p, cancel: cancel, done: make(chan struct{})}
	d.declared[dc.Service] = dp
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(dp.done)
		p.Run(cctx)
	}()
}

// Admitted returns the declarations policy admits whose pool runs, in
// AdmitRoutes' order. A declaration admitted under an older policy whose pool has
// not started yet is left out until the next reconcile.
func (d *DeclaredPools[P]) Admitted(policy RoutePolicy) []Admitted[P] {
	d.mu.Lock()
	defer d.mu.Unlock()
	admitted, _ := d.admit(policy)
	var out []Admitted[P]
	for _, dc := range admitted {
		dp := d.declared[dc.Service]
		if dp == nil || dp.decl.Key() != dc.Key() {
			continue // its pool starts at the next reconcile
		}
		out = append(out, Admitted[P]{Decl: dc, Pool: dp.pool})
	}
	return out
}

// Pools returns the running pools, by service.
func (d *DeclaredPools[P]) Pools() []P {
	d.mu.Lock()
	defer d.mu.Unlock()
	svcs := make([]string, 0, len(d.declared))
	for svc := range d.declared {
		svcs = append(svcs, svc)
	}
	slices.Sort(svcs)
	out := make([]P, 0, len(svcs))
	for _, svc := range svcs {
		out = append(out, d.declared[svc].pool)
	}
	return out
}

// Refused returns what the last reconcile refused, for /status.
func (d *DeclaredPools[P]) Refused() []RouteRefusal {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.refused)
}

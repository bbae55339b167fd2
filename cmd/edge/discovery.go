package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/health"
	"github.com/edgelb/edge/internal/admin"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
	"github.com/hashicorp/consul/api"
	"golang.org/x/sync/errgroup"
)

// usesConsul reports whether the config asks for a Consul client: a pool
// discovered from it, self-registration, ticket keys kept in its KV store,
// a fleet prefix, routes the registry may declare (consul.routes), or an
// explicit agent address. With a client, the registry's declarations are followed and
// shown in /status even when consul.routes admits none of them.
func usesConsul(cfg *conf.Config) bool {
	r := cfg.Consul.Routes
	if cfg.Consul.Address != "" || cfg.Consul.Register.Enabled || len(r.AllowedHosts) > 0 || r.AllowAnyHost || cfg.Consul.Fleet.Prefix != "" {
		return true
	}
	for _, l := range cfg.Listeners {
		if l.TLS != nil && (l.TLS.SessionTickets.ConsulKey != "" || l.TLS.OCSP.ConsulPrefix != "") {
			return true
		}
	}
	for _, p := range cfg.Pools {
		if p.Consul.Service != "" || p.Cookie.ConsulKey != "" {
			return true
		}
	}
	return false
}

func newConsulClient(cfg *conf.Config) (*api.Client, error) {
	tok, err := cfg.Consul.ACLToken()
	if err != nil {
		return nil, err
	}
	return discovery.NewClient(discovery.ClientOptions{
		Address: cfg.Consul.Address,
		Token:   string(tok),
		CAFile:  cfg.Consul.CAFile,
	})
}

// consulTicketKeys is an edgetls.TicketKeySource over discovery.TicketKeys:
// the fleet's keys from Consul KV, in the key-file format.
type consulTicketKeys struct {
	kv  *discovery.TicketKeys
	key string
}

func (c consulTicketKeys) TicketKeys(ctx context.Context) ([][]byte, error) {
	v, err := c.kv.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	defer clear(v)
	keys, err := edgetls.ParseTicketKeys(v)
	if err != nil {
		return nil, fmt.Errorf("ticket keys in consul kv %q: %w", c.key, err)
	}
	return keys, nil
}

// newConsulTicketKeys returns the ticket-key source of a listener whose
// keys live in Consul KV.
func newConsulTicketKeys(client *api.Client, st conf.SessionTickets) consulTicketKeys {
	return consulTicketKeys{key: st.ConsulKey, kv: discovery.NewTicketKeys(client, discovery.TicketKeysOptions{
		Key:         st.ConsulKey,
		RotateEvery: st.RotateEvery.Std(),
		Keep:        st.Keep,
		Validate: func(v []byte) error {
			keys, err := edgetls.ParseTicketKeys(v)
			for _, k := range keys {
				clear(k)
			}
			return err
		},
	})}
}

// dynamic owns everything that follows Consul: one watcher per discovered
// pool, one checker per pool with active checks, the route watcher and the
// pools it creates for services that declare their own routes.
type dynamic struct {
	e      *edge
	client *api.Client

	mu       sync.Mutex
	watchers map[string]*discovery.Watcher // by pool name
	routes   *discovery.RouteWatcher
	declared map[string]*declaredPool // by service
	ctx      context.Context          // the route watcher's; declared pools end with it
	g        *errgroup.Group          // serve's; the declared pools' loops run in it
	all      []discovery.RouteDecl    // every valid declaration, as the registry last said
	refused  []discovery.RouteRefusal // of all, what the file's policy or an older claim refused
	logged   map[string]bool          // refusals already logged, so each is logged once

	// reconcileMu serialises reconcile: a registry change and a reload
	// may both ask for one.
	reconcileMu sync.Mutex
}

// declaredPool is a pool created for a service that declared a route.
type declaredPool struct {
	decl   discovery.RouteDecl
	ent    *poolEntry
	cancel context.CancelFunc
	done   chan struct{} // closed when its watcher and checker have stopped
}

// startDynamic starts discovery watchers, health checkers, the route
// watcher and self-registration in g; they all end with ctx.
func (e *edge) startDynamic(ctx context.Context, g *errgroup.Group) {
	e.mu.Lock()
	cfg := e.cfg
	pools := e.pools
	e.mu.Unlock()
	d := e.dyn
	for i := range cfg.Pools {
		ent := pools[cfg.Pools[i].Name]
		if ent.spec.consul.Service != "" && d.client != nil {
			w, err := d.newWatcher(ent, cfg.StateDir)
			if err != nil {
				e.log.Error("discovery not started", "pool", ent.spec.name, "err", err)
			} else {
				g.Go(func() error { return w.Run(ctx) })
			}
		}
		c, err := e.newChecker(ent)
		if err != nil {
			e.log.Error("health checks not started", "pool", ent.spec.name, "err", err)
		} else if c != nil {
			g.Go(func() error { return c.Run(ctx) })
		}
	}
	if d.client == nil {
		return
	}
	d.mu.Lock()
	d.ctx, d.g = ctx, g
	d.mu.Unlock()
	rw, err := discovery.NewRouteWatcher(discovery.RouteWatcherOptions{
		Client:   d.client,
		OnChange: d.setDeclared,
		Logger:   e.log,
	})
	if err != nil {
		e.log.Error("registry routes not followed", "err", err)
	} else {
		d.mu.Lock()
		d.routes = rw
		d.mu.Unlock()
		g.Go(func() error {
			err := rw.Run(ctx)
			d.stopDeclared()
			return err
		})
	}
	if cfg.Consul.Register.Enabled {
		g.Go(func() error { return e.registerSelf(ctx, cfg) })
	}
}

// newChecker returns the active health checker of ent, or nil when the
// pool has no active checks.
func (e *edge) newChecker(ent *poolEntry) (*health.Checker, error) {
	if ent.spec.health == nil {
		return nil, nil
	}
	opts := *ent.spec.health
	opts.Source = ent.bal
	opts.Logger = e.log.With("pool", ent.spec.name)
	opts.Observer = e.metrics
	return health.New(opts)
}

// newWatcher returns the discovery watcher of ent, a pool whose members
// come from Consul; stateDir is the running configuration's state_dir.
func (d *dynamic) newWatcher(ent *poolEntry, stateDir string) (*discovery.Watcher, error) {
	spec, target := ent.spec, ent.bal
	w, err := discovery.NewWatcher(discovery.WatcherOptions{
		Pool:       spec.name,
		Target:     target,
		Client:     d.client,
		Service:    spec.consul.Service,
		Tag:        spec.consul.Tag,
		Datacenter: spec.consul.Datacenter,
		Members:    discovery.MemberOptions{IncludeWarning: !spec.consul.PassingOnly},
		StateDir:   stateDir,
		OnGone:     func(ids []string) { d.e.goneFromRegistry(spec.name, target, spec.leave, ids) },
		Logger:     d.e.log.With("pool", spec.name),
		Observer:   d.e.metrics,
	})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.watchers[spec.name] = w
	d.mu.Unlock()
	return w, nil
}

// setDeclared takes the registry's current declarations and reconciles.
func (d *dynamic) setDeclared(decls []discovery.RouteDecl) {
	d.mu.Lock()
	d.all = decls
	d.mu.Unlock()
	d.reconcile()
}

// routePolicy is what cfg lets the registry claim: the hosts it allows, and
// the file's own routes, which no declaration may take.
func routePolicy(cfg *conf.Config) discovery.RoutePolicy {
	p := discovery.RoutePolicy{
		AllowedHosts: cfg.Consul.Routes.AllowedHosts,
		AllowAnyHost: cfg.Consul.Routes.AllowAnyHost,
	}
	for _, r := range cfg.Routes {
		if !r.Default {
			p.File = append(p.File, discovery.FileRoute{Hosts: r.Hosts, PathPrefix: r.PathPrefix})
		}
	}
	return p
}

// admit applies cfg's policy to the registry's declarations; the routes
// that run now are the holders (see discovery.AdmitRoutes). d.mu is held.
func (d *dynamic) admit(cfg *conf.Config) ([]discovery.RouteDecl, []discovery.RouteRefusal) {
	held := make([]discovery.RouteDecl, 0, len(d.declared))
	for _, dp := range d.declared {
		held = append(held, dp.decl)
	}
	return discovery.AdmitRoutes(d.all, routePolicy(cfg), held)
}

// reconcile brings the pools of declared routes in line with what the
// current file admits of the registry's declarations, logs each new
// refusal once, and republishes the routes. It runs after every registry
// change and every reload; nothing the registry says can make it fail.
func (d *dynamic) reconcile() {
	d.reconcileMu.Lock()
	defer d.reconcileMu.Unlock()
	cfg := d.e.config()

	d.mu.Lock()
	ctx, g := d.ctx, d.g
	admitted, refused := d.admit(cfg)
	d.refused = refused
	logged := make(map[string]bool, len(refused))
	for _, r := range refused {
		key := r.String()
		if !d.logged[key] {
			d.e.log.Warn("declared route refused", "service", r.Service, "route", r.Route, "reason", r.Reason)
		}
		logged[key] = true
	}
	d.logged = logged
	want := map[string]discovery.RouteDecl{}
	for _, dc := range admitted {
		want[dc.Service] = dc
	}
	var stop []*declaredPool
	for svc, dp := range d.declared {
		if w, ok := want[svc]; !ok || !w.SamePool(dp.decl) {
			stop = append(stop, dp)
			delete(d.declared, svc)
			delete(d.watchers, declaredPoolName(svc))
		} else {
			dp.decl = w
		}
	}
	d.mu.Unlock()
	for _, dp := range stop {
		dp.cancel()
		<-dp.done
		d.e.metrics.forgetPool(dp.ent.bal)
	}
	for svc, dc := range want {
		d.mu.Lock()
		_, have := d.declared[svc]
		d.mu.Unlock()
		if have || ctx == nil || ctx.Err() != nil {
			continue
		}
		dp, err := d.startDeclared(ctx, g, dc, cfg.StateDir)
		if err != nil {
			d.e.log.Warn("declared route ignored", "service", svc, "err", err)
			continue
		}
		d.mu.Lock()
		d.declared[svc] = dp
		d.mu.Unlock()
	}
	d.e.publishRoutes()
	d.e.initMetrics() // a declared pool's series exist before its first event
}

// declaredPoolName names the pool made for a service; the prefix keeps it
// apart from the file's pool names (which cannot contain ':').
func declaredPoolName(service string) string { return "consul:" + service }

// declaredPoolConf is the pool a declaration asks for: a file pool's
// defaults (conf.DefaultPool) with the declaration's own settings.
func declaredPoolConf(dc discovery.RouteDecl) conf.Pool {
	pc := conf.DefaultPool()
	pc.Name = declaredPoolName(dc.Service)
	pc.Consul.Service = dc.Service
	if dc.Sticky != "" {
		pc.Balance = dc.Sticky
	}
	pc.Limits.MaxConnections = dc.MaxConns
	pc.Limits.MaxConnectionsPerClientIP = dc.MaxConnsPerClientIP
	if dc.Health != "" {
		pc.Health.Type = dc.Health
	}
	if dc.HealthInterval > 0 {
		pc.Health.Interval = conf.Duration(dc.HealthInterval)
		pc.Health.Timeout = min(pc.Health.Timeout, pc.Health.Interval)
	}
	return pc
}

// startDeclared builds the pool of dc through the same mapping as the
// file's pools, and runs its watcher and checker in g until ctx ends or
// the pool is stopped.
func (d *dynamic) startDeclared(ctx context.Context, g *errgroup.Group, dc discovery.RouteDecl, stateDir string) (*declaredPool, error) {
	pc := declaredPoolConf(dc)
	if err := pc.Validate(); err != nil {
		return nil, err
	}
	spec, err := poolSpecOf(&pc)
	if err != nil {
		return nil, err
	}
	ent, err := d.e.newPoolEntry(spec, nil)
	if err != nil {
		return nil, err
	}
	w, err := d.newWatcher(ent, stateDir)
	if err != nil {
		return nil, err
	}
	c, err := d.e.newChecker(ent)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	dp := &declaredPool{decl: dc, ent: ent, cancel: cancel, done: make(chan struct{})}
	g.Go(func() error {
		defer close(dp.done)
		// What the registry declares never stops edge: the loops end
		// with the pool.
		var pg errgroup.Group
		pg.Go(func() error { d.runWatcher(cctx, spec.name, w); return nil })
		if c != nil {
			pg.Go(func() error {
				if err := c.Run(cctx); err != nil && cctx.Err() == nil {
					d.e.log.Error("health checks stopped", "pool", spec.name, "err", err)
				}
				return nil
			})
		}
		return pg.Wait()
	})
	return dp, nil
}

// runWatcher runs w until ctx ends, restarting it after a failure.
func (d *dynamic) runWatcher(ctx context.Context, pool string, w *discovery.Watcher) {
	for ctx.Err() == nil {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			d.e.log.Error("discovery watcher stopped; restarting", "pool", pool, "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
}

func (d *dynamic) stopDeclared() {
	d.mu.Lock()
	list := make([]*declaredPool, 0, len(d.declared))
	for svc, dp := range d.declared {
		list = append(list, dp)
		delete(d.declared, svc)
	}
	d.mu.Unlock()
	for _, dp := range list {
		dp.cancel()
		<-dp.done
	}
}

// declaredRoutes returns the routes of the declared pools that cfg admits.
// The proxy matches them only for hosts the file's routes do not name
// (proxy.Route.Declared), so even a declaration admitted under an older
// file never takes a route from a newer one.
func (d *dynamic) declaredRoutes(cfg *conf.Config) []proxy.Route {
	d.mu.Lock()
	defer d.mu.Unlock()
	admitted, _ := d.admit(cfg)
	var out []proxy.Route
	for _, dc := range admitted {
		dp := d.declared[dc.Service]
		if dp == nil || dp.decl.Key() != dc.Key() {
			continue // its pool starts at the next reconcile
		}
		out = append(out, proxy.Route{Hosts: dc.Hosts, PathPrefix: dc.PathPrefix, Declared: true, Pool: dp.ent.px})
	}
	return out
}

func (d *dynamic) pools() []*balance.Pool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*balance.Pool, 0, len(d.declared))
	for _, dp := range d.declared {
		out = append(out, dp.ent.bal)
	}
	return out
}

// publishRoutes installs the file's routes plus the registry's.
func (e *edge) publishRoutes() {
	e.mu.Lock()
	defer e.mu.Unlock()
	routes := routesFor(e.cfg, e.pools)
	routes = append(routes, e.dyn.declaredRoutes(e.cfg)...)
	if err := e.proxy.SetRoutes(routes); err != nil {
		e.log.Error("routes from the registry refused; keeping the previous routes", "err", err)
	}
}

// registerSelf registers edge in Consul twice: the public listener as
// consul.register.service with a check on /readyz (so a draining edge
// leaves the catalog before it stops), and the metrics endpoint as
// consul.register.metrics_service with a check on /healthz (it stays while
// the edge drains, so the drain can be watched, and a dead edge shows as
// down to Prometheus). It retries while the agent is unreachable and
// deregisters both when ctx ends.
func (e *edge) registerSelf(ctx context.Context, cfg *conf.Config) error {
	regs := selfRegistrations(cfg, e.listeners[0].ln.Addr(), e.admin)
	var deregs []func(context.Context) error
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		for _, dereg := range deregs {
			if err := dereg(dctx); err != nil {
				e.log.Warn("consul deregistration failed", "err", err)
			}
		}
	}()
	for _, opts := range regs {
		backoff := time.Second
		for {
			dereg, err := discovery.Register(ctx, e.dyn.client, opts)
			if err == nil {
				e.log.Info("registered in consul", "service", opts.Service, "id", opts.ID, "port", opts.Port)
				deregs = append(deregs, dereg)
				break
			}
			e.log.Warn("consul registration failed; retrying", "service", opts.Service, "err", err, "in", backoff.String())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}
	<-ctx.Done()
	return nil
}

// selfRegistrations are edge's two registrations: the public listener pub
// and the metrics endpoint (the metrics listener, else the admin listener).
func selfRegistrations(cfg *conf.Config, pub net.Addr, a *admin.Server) []discovery.RegisterOptions {
	r := cfg.Consul.Register
	instance := r.Instance
	if instance == "" {
		// The admin port is the one no two processes on a host share:
		// the public one may be (SO_REUSEPORT), and several edges
		// registering one ID overwrite each other in the catalog.
		host, _ := os.Hostname()
		instance = host + "-" + a.Addr().String()
	}
	instance = serviceIDPart(instance)
	pubHost, pubPort := advertised(pub)
	mHost, mPort := advertised(a.MetricsAddr())
	return []discovery.RegisterOptions{{
		Service:         r.Service,
		ID:              r.Service + "-" + instance,
		Address:         pubHost,
		Port:            pubPort,
		Meta:            map[string]string{"instance": instance},
		CheckURL:        "http://" + checkAddr(a.Addr()) + "/readyz",
		Interval:        2 * time.Second,
		DeregisterAfter: time.Minute,
	}, {
		Service:  r.MetricsService,
		ID:       r.MetricsService + "-" + instance,
		Address:  mHost,
		Port:     mPort,
		Meta:     map[string]string{"instance": instance},
		CheckURL: "http://" + checkAddr(a.MetricsAddr()) + "/healthz",
		Interval: 10 * time.Second,
		// Long enough for EdgeDown (up == 0 for 1m) to fire before a
		// dead edge's target disappears from Prometheus.
		DeregisterAfter: 10 * time.Minute,
	}}
}

// advertised is the address and port to announce for a bound address: a
// specific IP as is, a wildcard as "" (Consul then announces the node's
// address).
func advertised(a net.Addr) (string, int) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return "", 0
	}
	if ap.Addr().IsUnspecified() {
		return "", int(ap.Port())
	}
	return ap.Addr().Unmap().String(), int(ap.Port())
}

// checkAddr is how the local Consul agent reaches a listener: a wildcard
// bind is reachable on loopback.
func checkAddr(a net.Addr) string {
	host, port := advertised(a)
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// serviceIDPart keeps what Consul takes in a service ID that travels in
// URL paths (/v1/agent/service/deregister/<id>): letters, digits, '.',
// '_' and '-'; anything else becomes '-'.
func serviceIDPart(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
}

// watcherStatus is every discovered pool's status, in no order.
func (d *dynamic) watcherStatus() []discovery.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]discovery.Status, 0, len(d.watchers))
	for _, w := range d.watchers {
		out = append(out, w.Status())
	}
	return out
}

// discoveryStatus is the discovery part of /status.
func (e *edge) discoveryStatus() any {
	d := e.dyn
	if d == nil || d.client == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := struct {
		Pools  []discovery.Status     `json:"pools"`
		Routes *discovery.RouteStatus `json:"routes,omitempty"`
		// RefusedRoutes are declarations the file's consul.routes
		// policy, the file's own routes or an older claim refused.
		RefusedRoutes []discovery.RouteRefusal `json:"refused_routes,omitempty"`
	}{RefusedRoutes: d.refused}
	names := make([]string, 0, len(d.watchers))
	for n := range d.watchers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		out.Pools = append(out.Pools, d.watchers[n].Status())
	}
	if d.routes != nil {
		st := d.routes.Status()
		out.Routes = &st
	}
	return out
}

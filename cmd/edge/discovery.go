package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/cmd/edge/internal/poolset"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/health"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
	"github.com/hashicorp/consul/api"
	"golang.org/x/sync/errgroup"
)

// newConsulClient is the one place a Consul client is made from the file:
// the agent's address, the ACL token and the CA. maxResponse, when above
// 0, bounds every answer of the client (consul.ClientOptions): a component
// whose reads are not all bounded by its own code (Consul's semaphore
// lists a prefix) or that follows a prefix anyone may write gets a client
// of its own with its bound.
func newConsulClient(cfg *conf.Config, maxResponse int64) (*api.Client, error) {
	tok, err := cfg.Consul.ACLToken()
	if err != nil {
		return nil, fmt.Errorf("consul: %w", err)
	}
	c, err := consul.NewClient(consul.ClientOptions{
		Address: cfg.Consul.Address, Token: string(tok), CAFile: cfg.Consul.CAFile,
		MaxResponseBytes: maxResponse,
	})
	if err != nil {
		return nil, fmt.Errorf("consul: %w", err)
	}
	return c, nil
}

// newConsulTicketKeys returns the ticket-key source of a listener whose
// keys live in Consul KV, in edgetls's key-file format, sealed with the
// key of consul_seal_key_file.
func newConsulTicketKeys(client *api.Client, st conf.SessionTickets) (edgetls.TicketKeySource, error) {
	seal, err := st.SealKey()
	if err != nil {
		return nil, fmt.Errorf("session_tickets.consul_seal_key_file: %w", err)
	}
	if seal == nil {
		return nil, errors.New("session_tickets.consul_seal_key_file: required with consul_key")
	}
	return fleet.NewTicketKeys(client, fleet.TicketKeysOptions{
		Key:         st.ConsulKey,
		RotateEvery: st.RotateEvery.Std(),
		Keep:        st.Keep,
		Parse:       edgetls.ParseTicketKeys,
		SealKey:     seal,
	}), nil
}

// dynamic owns everything that follows Consul: one watcher per discovered
// pool of the file, one checker per pool with active checks, the route
// watcher, and the pools services declare (discovery.DeclaredPools, with
// dynamic as its host).
type dynamic struct {
	e      *edge
	client *api.Client

	mu       sync.Mutex
	watchers map[string]*discovery.Watcher // the file's pools, by name
	routes   *discovery.RouteWatcher

	declared *discovery.DeclaredPools[*declaredPool]
}

func newDynamic(e *edge) *dynamic {
	d := &dynamic{e: e, watchers: map[string]*discovery.Watcher{}}
	d.declared = discovery.NewDeclaredPools(discovery.DeclaredPoolsOptions[*declaredPool]{Host: d, Logger: e.log})
	return d
}

// declaredPool is a pool created for a service that declared a route:
// discovery.DeclaredPools runs it.
type declaredPool struct {
	ent     *poolset.Pool
	watcher *discovery.Watcher
	checker *health.Checker // nil without active checks
	log     *slog.Logger
}

// Run implements discovery.DeclaredPool: the watcher and the checker until
// ctx ends.
func (p *declaredPool) Run(ctx context.Context) {
	var g errgroup.Group
	g.Go(func() error { return p.watcher.Run(ctx) }) // returns only nil
	if p.checker != nil {
		g.Go(func() error {
			if err := p.checker.Run(ctx); err != nil && ctx.Err() == nil {
				p.log.Error("health checks stopped", "err", err)
			}
			return nil
		})
	}
	_ = g.Wait()
}

// startDynamic starts discovery watchers, health checkers, the route
// watcher with the declared pools, and self-registration in g; they all
// end with ctx.
func (e *edge) startDynamic(ctx context.Context, g *errgroup.Group) {
	e.mu.Lock()
	cfg := e.cfg
	pools := e.pools
	e.mu.Unlock()
	d := e.dyn
	for i := range cfg.Pools {
		ent := pools[cfg.Pools[i].Name]
		if ent.Spec.Consul.Service != "" && d.client != nil {
			w, err := d.newWatcher(ent, cfg.StateDir)
			if err != nil {
				e.log.Error("discovery not started", "pool", ent.Spec.Name, "err", err)
			} else {
				d.mu.Lock()
				d.watchers[ent.Spec.Name] = w
				d.mu.Unlock()
				g.Go(func() error { return w.Run(ctx) })
			}
		}
		c, err := e.newChecker(ent)
		if err != nil {
			e.log.Error("health checks not started", "pool", ent.Spec.Name, "err", err)
		} else if c != nil {
			g.Go(func() error { return c.Run(ctx) })
		}
	}
	if d.client == nil {
		return
	}
	rw, err := discovery.NewRouteWatcher(discovery.RouteWatcherOptions{
		Client:   d.client,
		OnChange: d.declared.SetDeclared,
		Logger:   e.log,
	})
	if err != nil {
		e.log.Error("registry routes not followed", "err", err)
	} else {
		d.mu.Lock()
		d.routes = rw
		d.mu.Unlock()
		g.Go(func() error { return d.declared.Run(ctx) })
		g.Go(func() error { return rw.Run(ctx) })
	}
	if cfg.Consul.Register.Enabled {
		regs := selfRegistrations(cfg, e.listeners[0].ln.Addr(), e.admin)
		g.Go(func() error { discovery.KeepRegistered(ctx, d.client, regs, e.log); return nil })
	}
}

// newChecker returns the active health checker of ent, or nil when the
// pool has no active checks.
func (e *edge) newChecker(ent *poolset.Pool) (*health.Checker, error) {
	if ent.Spec.Health == nil {
		return nil, nil
	}
	opts := *ent.Spec.Health
	opts.Source = ent.Bal
	opts.Logger = e.log.With("pool", ent.Spec.Name)
	opts.Observer = e.metrics
	return health.New(opts)
}

// newWatcher returns the discovery watcher of ent, a pool whose members
// come from Consul; stateDir is the running configuration's state_dir.
func (d *dynamic) newWatcher(ent *poolset.Pool, stateDir string) (*discovery.Watcher, error) {
	spec, target := ent.Spec, ent.Bal
	return discovery.NewWatcher(discovery.WatcherOptions{
		Pool:       spec.Name,
		Target:     target,
		Client:     d.client,
		Service:    spec.Consul.Service,
		Tag:        spec.Consul.Tag,
		Datacenter: spec.Consul.Datacenter,
		Members:    discovery.MemberOptions{IncludeWarning: !spec.Consul.PassingOnly},
		StateDir:   stateDir,
		OnGone:     func(ids []string) { d.e.goneFromRegistry(spec.Name, target, spec.Leave, ids) },
		Logger:     d.e.log.With("pool", spec.Name),
		Observer:   d.e.metrics,
	})
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

// Policy implements discovery.PoolHost: the running file's policy.
func (d *dynamic) Policy() discovery.RoutePolicy { return routePolicy(d.e.config()) }

// NewPool implements discovery.PoolHost: the pool of dc, built through the
// same mapping as the file's pools.
func (d *dynamic) NewPool(dc discovery.RouteDecl) (*declaredPool, error) {
	pc := declaredPoolConf(dc)
	if err := pc.Validate(); err != nil {
		return nil, err
	}
	spec, err := poolset.SpecOf(&pc)
	if err != nil {
		return nil, err
	}
	ent, err := d.e.poolBuilder().New(spec, nil)
	if err != nil {
		return nil, err
	}
	w, err := d.newWatcher(ent, d.e.config().StateDir)
	if err != nil {
		return nil, err
	}
	c, err := d.e.newChecker(ent)
	if err != nil {
		return nil, err
	}
	return &declaredPool{ent: ent, watcher: w, checker: c, log: d.e.log.With("pool", spec.Name)}, nil
}

// Removed implements discovery.PoolHost: the pool's series go with it.
func (d *dynamic) Removed(p *declaredPool) { d.e.metrics.ForgetPool(p.ent.Bal.Name()) }

// Changed implements discovery.PoolHost: the registry's routes are
// republished, and a declared pool's series exist before its first event.
func (d *dynamic) Changed() {
	d.e.publishRoutes()
	d.e.initMetrics()
}

// declaredPoolName names the pool made for a service (conf.DeclaredPool).
func declaredPoolName(service string) string { return conf.DeclaredPoolName(service) }

// declaredPoolConf is the pool a declaration asks for (conf.DeclaredPool).
func declaredPoolConf(dc discovery.RouteDecl) conf.Pool {
	return conf.DeclaredPool(conf.PoolDeclaration{
		Service: dc.Service, Balance: dc.Sticky,
		MaxConnections: dc.MaxConns, MaxConnectionsPerClientIP: dc.MaxConnsPerClientIP,
		Health: dc.Health, HealthInterval: dc.HealthInterval,
	})
}

// declaredRoutes returns the routes of the declared pools that cfg admits.
// The proxy matches them only for hosts the file's routes do not name
// (proxy.Route.Declared), so even a declaration admitted under an older
// file never takes a route from a newer one.
func (d *dynamic) declaredRoutes(cfg *conf.Config) []proxy.Route {
	var out []proxy.Route
	for _, a := range d.declared.Admitted(routePolicy(cfg)) {
		out = append(out, proxy.Route{Hosts: a.Decl.Hosts, PathPrefix: a.Decl.PathPrefix, Declared: true, Pool: a.Pool.ent.Proxy})
	}
	return out
}

func (d *dynamic) pools() []*balance.Pool {
	dps := d.declared.Pools()
	out := make([]*balance.Pool, 0, len(dps))
	for _, dp := range dps {
		out = append(out, dp.ent.Bal)
	}
	return out
}

// publishRoutes installs the file's routes plus the registry's.
func (e *edge) publishRoutes() {
	e.mu.Lock()
	defer e.mu.Unlock()
	routes := poolset.Routes(e.cfg, e.pools)
	routes = append(routes, e.dyn.declaredRoutes(e.cfg)...)
	if err := e.proxy.SetRoutes(routes); err != nil {
		e.log.Error("routes from the registry refused; keeping the previous routes", "err", err)
	}
}

// selfRegistrations are edge's two registrations in Consul
// (discovery.SelfRegistrations): the public listener pub, and the metrics
// endpoint (the metrics listener, else the admin listener).
func selfRegistrations(cfg *conf.Config, pub net.Addr, a *admin.Server) []discovery.RegisterOptions {
	r := cfg.Consul.Register
	host, _ := os.Hostname()
	return discovery.SelfRegistrations(discovery.SelfOptions{
		Service: r.Service, MetricsService: r.MetricsService, Instance: r.Instance, Host: host,
		Public: pub, Admin: a.Addr(), Metrics: a.MetricsAddr(),
	})
}

// watcherStatus is every discovered pool's status, the file's and the
// declared ones, by pool name.
func (d *dynamic) watcherStatus() []discovery.Status {
	d.mu.Lock()
	out := make([]discovery.Status, 0, len(d.watchers))
	for _, w := range d.watchers {
		out = append(out, w.Status())
	}
	d.mu.Unlock()
	for _, dp := range d.declared.Pools() {
		out = append(out, dp.watcher.Status())
	}
	slices.SortFunc(out, func(a, b discovery.Status) int { return strings.Compare(a.Pool, b.Pool) })
	return out
}

// discoveryStatus is the discovery part of /status.
func (e *edge) discoveryStatus() any {
	d := e.dyn
	if d == nil || d.client == nil {
		return nil
	}
	out := struct {
		Pools  []discovery.Status     `json:"pools"`
		Routes *discovery.RouteStatus `json:"routes,omitempty"`
		// RefusedRoutes are declarations the file's consul.routes
		// policy, the file's own routes or an older claim refused.
		RefusedRoutes []discovery.RouteRefusal `json:"refused_routes,omitempty"`
	}{Pools: d.watcherStatus(), RefusedRoutes: d.declared.Refused()}
	d.mu.Lock()
	rw := d.routes
	d.mu.Unlock()
	if rw != nil {
		st := rw.Status()
		out.Routes = &st
	}
	return out
}

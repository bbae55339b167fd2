package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/health"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
	"github.com/hashicorp/consul/api"
	"golang.org/x/sync/errgroup"
)

// usesConsul reports whether the config asks for a Consul client: a pool
// discovered from it, self-registration, ticket keys kept in its KV store,
// or an explicit agent address (which also turns on routes declared in the
// registry).
func usesConsul(cfg *conf.Config) bool {
	if cfg.Consul.Address != "" || cfg.Consul.Register.Enabled {
		return true
	}
	for _, l := range cfg.Listeners {
		if l.TLS != nil && l.TLS.SessionTickets.ConsulKey != "" {
			return true
		}
	}
	for _, p := range cfg.Pools {
		if p.Consul.Service != "" {
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
}

// declaredPool is a pool created for a service that declared a route.
type declaredPool struct {
	decl   discovery.RouteDecl
	bal    *balance.Pool
	px     *proxy.Pool
	cancel context.CancelFunc
	done   chan struct{}
}

// startDynamic starts discovery watchers, health checkers, the route
// watcher and self-registration; they all end with ctx.
func (e *edge) startDynamic(ctx context.Context, g *errgroup.Group) {
	e.mu.Lock()
	cfg := e.cfg
	pools := e.pools
	e.mu.Unlock()
	d := e.dyn
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		ent := pools[pc.Name]
		if pc.Consul.Service != "" && d.client != nil {
			w, err := d.newWatcher(pc.Name, pc.Consul.Service, pc.Consul.Tag, pc.Consul.Datacenter, pc.Consul.PassingOnly, ent.bal)
			if err != nil {
				e.log.Error("discovery not started", "pool", pc.Name, "err", err)
			} else {
				g.Go(func() error { return w.Run(ctx) })
			}
		}
		if pc.Health.Type != conf.HealthNone {
			c, err := health.New(health.Options{
				Pool:         pc.Name,
				Source:       ent.bal,
				Type:         pc.Health.Type,
				Interval:     pc.Health.Interval.Std(),
				Timeout:      pc.Health.Timeout.Std(),
				Rise:         pc.Health.Rise,
				Fall:         pc.Health.Fall,
				Path:         pc.Health.Path,
				ExpectStatus: pc.Health.ExpectStatus,
				Logger:       e.log.With("pool", pc.Name),
				Observer:     e.metrics,

				// Bounds the backend's response head, as on the upgrade.
				MaxHeaderBytes: pc.MaxResponseHeaderBytes,
			})
			if err != nil {
				e.log.Error("health checks not started", "pool", pc.Name, "err", err)
			} else {
				g.Go(func() error { return c.Run(ctx) })
			}
		}
	}
	if d.client == nil {
		return
	}
	rw, err := discovery.NewRouteWatcher(discovery.RouteWatcherOptions{
		Client:   d.client,
		OnChange: func(decls []discovery.RouteDecl) { d.setDeclared(ctx, decls) },
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

func (d *dynamic) newWatcher(pool, service, tag, dc string, passingOnly bool, target *balance.Pool) (*discovery.Watcher, error) {
	d.mu.Lock()
	stateDir := d.e.cfg.StateDir
	d.mu.Unlock()
	w, err := discovery.NewWatcher(discovery.WatcherOptions{
		Pool:       pool,
		Target:     target,
		Client:     d.client,
		Service:    service,
		Tag:        tag,
		Datacenter: dc,
		Members:    discovery.MemberOptions{IncludeWarning: !passingOnly},
		StateDir:   stateDir,
		Logger:     d.e.log.With("pool", pool),
		Observer:   d.e.metrics,
	})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.watchers[pool] = w
	d.mu.Unlock()
	return w, nil
}

// setDeclared reconciles the pools of services that declare routes with the
// registry's current list, then republishes the routes.
func (d *dynamic) setDeclared(ctx context.Context, decls []discovery.RouteDecl) {
	want := map[string]discovery.RouteDecl{}
	for _, dc := range decls {
		want[dc.Service] = dc
	}
	d.mu.Lock()
	var stop []*declaredPool
	for svc, dp := range d.declared {
		if w, ok := want[svc]; !ok || w.Sticky != dp.decl.Sticky || w.MaxConns != dp.decl.MaxConns {
			stop = append(stop, dp)
			delete(d.declared, svc)
			delete(d.watchers, "consul:"+svc)
		} else {
			dp.decl = w
		}
	}
	d.mu.Unlock()
	for _, dp := range stop {
		dp.cancel()
		<-dp.done
		d.e.metrics.forgetPool(dp.bal)
	}
	for svc, dc := range want {
		d.mu.Lock()
		_, have := d.declared[svc]
		d.mu.Unlock()
		if have {
			continue
		}
		dp, err := d.startDeclared(ctx, dc)
		if err != nil {
			d.e.log.Warn("declared route ignored", "service", svc, "err", err)
			continue
		}
		d.mu.Lock()
		d.declared[svc] = dp
		d.mu.Unlock()
	}
	d.e.publishRoutes()
}

// declaredPoolName names the pool made for a service; the prefix keeps it
// apart from the file's pool names (which cannot contain ':').
func declaredPoolName(service string) string { return "consul:" + service }

func (d *dynamic) startDeclared(ctx context.Context, dc discovery.RouteDecl) (*declaredPool, error) {
	name := declaredPoolName(dc.Service)
	mode := balance.LeastConn
	switch dc.Sticky {
	case discovery.StickyCookie:
		mode = balance.Cookie
	case discovery.StickyClientIP:
		mode = balance.ClientIP
	}
	bal, err := balance.NewPool(balance.PoolOptions{
		Name:  name,
		Mode:  mode,
		Eject: balance.EjectOptions{Failures: 5, Window: 30 * time.Second, Cooldown: 30 * time.Second},

		// Every ejection is logged, as for the file's pools.
		OnEject: d.e.logEjection,
	})
	if err != nil {
		return nil, err
	}
	w, err := d.newWatcher(name, dc.Service, "", "", true, bal)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	dp := &declaredPool{decl: dc, bal: bal, cancel: cancel, done: make(chan struct{})}
	// The defaults of a pool in the file: see conf.Pool.
	dp.px = &proxy.Pool{
		Name:             name,
		Balancer:         bal,
		MaxConns:         dc.MaxConns,
		DialTimeout:      2 * time.Second,
		HandshakeTimeout: 10 * time.Second,
		IdleTimeout:      time.Hour,
		WriteTimeout:     30 * time.Second,
		Retries:          2,
	}
	go func() {
		defer close(dp.done)
		for cctx.Err() == nil {
			if err := w.Run(cctx); err != nil && cctx.Err() == nil {
				d.e.log.Error("discovery watcher stopped; restarting", "pool", name, "err", err)
				select {
				case <-time.After(time.Second):
				case <-cctx.Done():
				}
			}
		}
	}()
	return dp, nil
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

// declaredRoutes returns the routes of services, skipping any that claim a
// host and path already routed by the file: file routes win (see
// discovery's package documentation).
func (d *dynamic) declaredRoutes(fileRoutes []conf.Route) []proxy.Route {
	claimed := map[string]bool{}
	for _, r := range fileRoutes {
		prefix := r.PathPrefix
		if prefix == "" {
			prefix = "/"
		}
		if len(r.Hosts) == 0 && !r.Default {
			claimed[prefix] = true
		}
		for _, h := range r.Hosts {
			claimed[h+prefix] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	services := make([]string, 0, len(d.declared))
	for svc := range d.declared {
		services = append(services, svc)
	}
	slices.Sort(services)
	var out []proxy.Route
	for _, svc := range services {
		dp := d.declared[svc]
		conflict := false
		for _, m := range dp.decl.Matches() {
			if claimed[m] {
				conflict = true
			}
		}
		if conflict {
			d.e.log.Warn("declared route shadowed by the file's route", "service", svc)
			continue
		}
		out = append(out, proxy.Route{Hosts: dp.decl.Hosts, PathPrefix: dp.decl.PathPrefix, Pool: dp.px})
	}
	return out
}

func (d *dynamic) pools() []*balance.Pool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*balance.Pool, 0, len(d.declared))
	for _, dp := range d.declared {
		out = append(out, dp.bal)
	}
	return out
}

// publishRoutes installs the file's routes plus the registry's.
func (e *edge) publishRoutes() {
	e.mu.Lock()
	defer e.mu.Unlock()
	routes := routesFor(e.cfg, e.pools)
	routes = append(routes, e.dyn.declaredRoutes(e.cfg.Routes)...)
	if err := e.proxy.SetRoutes(routes); err != nil {
		e.log.Error("routes from the registry refused; keeping the previous routes", "err", err)
	}
}

// registerSelf registers edge in Consul with a check on /readyz (so a
// draining edge leaves the catalog before it stops), retrying while the
// agent is unreachable, and deregisters when ctx ends.
func (e *edge) registerSelf(ctx context.Context, cfg *conf.Config) error {
	port := 0
	if len(e.listeners) > 0 {
		if _, p, err := net.SplitHostPort(e.listeners[0].ln.Addr().String()); err == nil {
			port, _ = strconv.Atoi(p)
		}
	}
	admin := e.admin.listener.Addr().String()
	opts := discovery.RegisterOptions{
		Service:         cfg.Consul.Register.Service,
		ID:              fmt.Sprintf("%s-%d", cfg.Consul.Register.Service, port),
		Port:            port,
		CheckURL:        "http://" + admin + "/readyz",
		Interval:        2 * time.Second,
		DeregisterAfter: time.Minute,
	}
	backoff := time.Second
	for {
		dereg, err := discovery.Register(ctx, e.dyn.client, opts)
		if err == nil {
			e.log.Info("registered in consul", "service", opts.Service, "id", opts.ID)
			<-ctx.Done()
			dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := dereg(dctx); err != nil {
				e.log.Warn("consul deregistration failed", "err", err)
			}
			return nil
		}
		e.log.Warn("consul registration failed; retrying", "err", err, "in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
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
	}{}
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

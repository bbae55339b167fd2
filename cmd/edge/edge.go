package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/cmd/edge/internal/gcpace"
	"github.com/edgelb/edge/cmd/edge/internal/metrics"
	"github.com/edgelb/edge/cmd/edge/internal/poolset"
	"github.com/edgelb/edge/cmd/edge/internal/rebalance"
	"github.com/edgelb/edge/cmd/edge/internal/sockets"
	"github.com/edgelb/edge/cmd/edge/internal/tokens"
	"github.com/edgelb/edge/cmd/edge/internal/upgrade"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/proxy"
	"golang.org/x/sync/errgroup"
)

// edge is one running process: every component built from one config, and
// the lifetimes that tie them together.
type edge struct {
	path string
	log  *slog.Logger

	mu    sync.Mutex // guards cfg and pools during reload
	cfg   *conf.Config
	pools map[string]*poolset.Pool

	proxy     *proxy.Server
	admin     *admin.Server
	accept    *proxy.AcceptLimit // client sockets of every public listener
	listeners []*listener
	metrics   *metrics.Registry
	dyn       *dynamic
	// cookieKeys follow the Consul KV entries of cookie pools with a
	// consul_key, by pool name; fixed at start.
	cookieKeys map[string]*fleet.CookieKeys
	// fleet publishes this edge's load and shares fleet-scope limits; nil
	// without consul.fleet.prefix.
	fleet *fleet.Member
	up    *upgrade.Upgrader // nil: no upgrades (tests building an edge in-process)

	// fleetActions follows the operator's actions of fleet scope under
	// consul.fleet.prefix; nil without one. Fixed at start.
	fleetActions *fleet.Actions

	// tokens is the token component (the providers' keys, each pool's
	// policy, the revocations in force); fleetRevocations follows the
	// fleet's revocations under consul.fleet.prefix, nil without one.
	tokens           *tokens.Tokens
	fleetRevocations *fleet.Revocations

	// rebalance moves live connections off over-share backends of the
	// pools that ask for it.
	rebalance *rebalance.Runner
	// fleetControls follows the pools' canaries and pauses of fleet scope;
	// nil without a fleet prefix.
	fleetControls *fleet.Controls

	// Drain progress for /status: when it began (unix nanoseconds, 0
	// before) and how many connections were live then.
	drainStart, drainFrom atomic.Int64
}

// newEdge builds every component of cfg; up, when not nil, supplies the
// listening sockets a previous process handed over and hands them on.
func newEdge(cfg *conf.Config, path string, log *slog.Logger, up *upgrade.Upgrader) (*edge, error) {
	e := &edge{path: path, log: log, cfg: cfg, pools: map[string]*poolset.Pool{}, up: up}
	e.metrics = metrics.New(metrics.Options{Pools: e.allPools, Build: metrics.BuildInfo(currentBuild())})
	if g, ok := up.Gate().(interface{ Lost() uint64 }); ok {
		e.metrics.WatchUpgradeSlots(g.Lost) // fleet.UpgradeSlots
	}
	e.dyn = newDynamic(e)
	if cfg.UsesConsul() {
		client, err := newConsulClient(cfg, 0)
		if err != nil {
			return nil, err
		}
		e.dyn.client = client
	}
	// The fleet's actions before the pools: each pool is built with its
	// name's fleet layer, so a backend the fleet drained is never pickable.
	if err := e.newFleetActions(cfg); err != nil {
		return nil, err
	}
	// The tokens before the pools too: each pool's policy holds the
	// verifier of its providers.
	if err := e.newTokens(cfg); err != nil {
		return nil, err
	}
	pools, err := e.poolBuilder().Build(cfg, e.pools)
	if err == nil {
		_, err = poolset.Apply(pools) // new pools: nobody left them yet
	}
	if err != nil {
		return nil, err
	}
	e.pools = pools
	if err := e.newCookieKeys(cfg); err != nil {
		return nil, err
	}
	if err := e.newFleet(cfg); err != nil {
		return nil, err
	}
	access := slog.New(slog.DiscardHandler)
	if cfg.Log.AccessLog {
		access = log.With("log", "access")
	}
	nofile := sockets.DescriptorLimit()
	maxConns, socks := sockets.ConnBudget(nofile, cfg.Limits.MaxConnections, cfg.MaxConnectionsDerived())
	e.accept = proxy.NewAcceptLimit(socks, log)
	log.Info("descriptor budget", "rlimit_nofile", nofile, "max_connections", maxConns, "max_client_sockets", socks)
	if nofile > 0 && maxConns > (nofile-sockets.FDReserve)/2 {
		log.Warn("limits.max_connections needs more descriptors than RLIMIT_NOFILE allows; new sockets are closed at max_client_sockets",
			"max_connections", maxConns, "rlimit_nofile", nofile)
	}
	e.proxy, err = proxy.New(proxy.Options{
		Routes:    poolset.Routes(cfg, pools),
		MaxConns:  maxConns,
		Logger:    log,
		AccessLog: access,
		Observer:  e.metrics,
		Quiet:     gcpace.ReturnMemory,
	})
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	e.tokens.SetTarget(e.proxy)
	e.rebalance = rebalance.New(rebalanceHost{e}, log)
	e.metrics.WatchRebalance(func() []metrics.RebalanceState {
		var out []metrics.RebalanceState
		for _, s := range e.rebalance.Status() {
			m := metrics.RebalanceState{Pool: s.Pool, Active: s.Active, Imbalance: s.Imbalance, Moved: s.Moved, Paused: s.Paused}
			if c := s.Canary; c != nil {
				m.Canary, m.CanaryShare, m.Held = c.Version, c.Share, c.Held
			}
			out = append(out, m)
		}
		return out
	})
	if e.admin, err = e.newAdmin(cfg); err != nil {
		return nil, err
	}
	for i := range cfg.Listeners {
		l, err := e.buildListener(cfg, cfg.Listeners[i])
		if err != nil {
			e.closeListeners()
			e.admin.Close()
			return nil, err
		}
		e.listeners = append(e.listeners, l)
	}
	e.metrics.WatchState(e.stateGauges())
	e.initMetrics()
	return e, nil
}

// config is the running configuration, which a reload replaces.
func (e *edge) config() *conf.Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

// pool is the running pool of that name, or nil.
func (e *edge) pool(name string) *balance.Pool {
	for _, p := range e.allPools() {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

func (e *edge) allPools() []*balance.Pool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*balance.Pool, 0, len(e.pools))
	for _, p := range e.pools {
		out = append(out, p.Bal)
	}
	// By name: /status, the status page and the API list pools in one
	// order, not the map's.
	slices.SortFunc(out, func(a, b *balance.Pool) int { return strings.Compare(a.Name(), b.Name()) })
	return append(out, e.dyn.pools()...)
}

// start runs every component on g until ctx ends, the admin listener until
// adminCtx does (a hand-over ends it first), and leaves /readyz true.
func (e *edge) start(ctx, adminCtx context.Context, g *errgroup.Group) {
	// The readiness runtime before the listeners: the first WebSockets
	// take it too. It stops once the drain closed the proxy.
	g.Go(func() error { return e.proxy.Run(ctx) })
	<-e.proxy.Started()
	for _, l := range e.listeners {
		if l.term != nil {
			g.Go(func() error { return l.term.Run(ctx) })
		}
		g.Go(l.serve)
	}
	e.startDynamic(ctx, g)
	e.runCookieKeys(ctx, g)
	e.runFleetActions(ctx, g)
	e.runTokens(ctx, g)
	e.runRebalance(ctx, g)
	if e.fleet != nil {
		g.Go(func() error { return e.fleet.Run(ctx) })
	}
	// Ready before the admin listener answers: a process an upgrade
	// started shares that socket with its parent, and must not answer
	// /readyz 503 to a health check while the parent serves. Until Run
	// starts, admin connections wait in the queue (bound at start).
	e.admin.SetReady(true)
	g.Go(func() error { return e.admin.Run(adminCtx) })
}

// reload re-reads the file and swaps routes, pools and certificates. A file
// that does not validate, or pools or routes that cannot be built, change
// nothing. It returns a one-line status for the service manager.
func (e *edge) reload() string {
	refuse := func(err error) string {
		e.metrics.Reloaded("error")
		e.log.Error("reload refused, keeping the running configuration", "err", err)
		return "serving; last reload refused: " + err.Error()
	}
	cfg, err := conf.Load(e.path)
	if err != nil {
		return refuse(err)
	}
	api, err := adminSettings(cfg)
	if err != nil {
		return refuse(err)
	}
	next, err := e.tokens.Prepare(context.Background(), &cfg.Auth)
	if err != nil {
		return refuse(err)
	}
	e.mu.Lock()
	b := e.poolBuilder()
	b.Auth = next.PoolAuth
	pools, err := b.Build(cfg, e.pools)
	if err == nil {
		err = e.proxy.SetRoutes(append(poolset.Routes(cfg, pools), e.dyn.declaredRoutes(cfg)...))
	}
	if err != nil {
		e.mu.Unlock()
		return refuse(err)
	}
	// The pools built hold the new providers' verifiers: their settings
	// are in force from here.
	next.Commit()
	// Routes now point at the new entries; make their members live (each
	// pool has the fleet's layer since it was built).
	gone, applyErr := poolset.Apply(pools)
	e.pools = pools
	e.admin.SetSettings(api)
	old := e.cfg
	e.cfg = cfg
	e.mu.Unlock()
	e.reapplyCookieKeys(cfg, pools)
	for _, d := range gone {
		e.backendsLeft(d)
	}
	if !conf.ListenersEqual(old.Listeners, cfg.Listeners) {
		e.log.Warn("listener settings changed; they take effect on restart")
	}
	result := "ok"
	if applyErr != nil {
		result = "partial"
		e.log.Error("reload applied in part", "err", applyErr)
	}
	for _, l := range e.listeners {
		if l.term != nil {
			if err := l.term.Reload(); err != nil {
				result = "partial"
				e.log.Error("certificate reload refused, old certificates keep serving", "listener", l.cfg.Name, "err", err)
			}
		}
	}
	// The new file may allow or keep for itself other hosts than the old.
	e.dyn.declared.Reconcile()
	e.initMetrics()
	e.metrics.Reloaded(result)
	e.log.Info("configuration reloaded", "result", result)
	return "serving; last reload " + result
}

// status is the admin /status document (admin.BuildStatus over e).
func (e *edge) status() any { return admin.BuildStatus(edgeStatus{e}) }

// stateGauges is where the state gauges of e come from.
func (e *edge) stateGauges() metrics.State {
	return metrics.State{
		Ready:        e.admin.Ready,
		Draining:     e.admin.Draining,
		RecordLayer:  e.proxy.RecordLayerTakeovers,
		Discovery:    e.dyn.watcherStatus,
		ClosePending: e.proxy.ClosePending,
		TLS: func() []metrics.ListenerTLS {
			var out []metrics.ListenerTLS
			for _, l := range e.listeners {
				if l.term != nil {
					out = append(out, metrics.ListenerTLS{Name: l.cfg.Name, Status: l.term.Status(), RotateEvery: l.cfg.TLS.SessionTickets.RotateEvery.Std()})
				}
			}
			return out
		},
		Listeners: func() []metrics.ListenerConns {
			out := make([]metrics.ListenerConns, 0, len(e.listeners))
			for _, l := range e.listeners {
				out = append(out, metrics.ListenerConns{Name: l.cfg.Name, Open: l.conns.Open()})
			}
			return out
		},
	}
}

// initMetrics creates the known series of every pool and listener.
func (e *edge) initMetrics() {
	var pools, tlsListeners []string
	for _, p := range e.allPools() {
		pools = append(pools, p.Name())
		e.metrics.InitBackends(p)
	}
	for _, l := range e.listeners {
		if l.term != nil {
			tlsListeners = append(tlsListeners, l.cfg.Name)
		}
	}
	e.metrics.InitSeries(pools, tlsListeners)
}

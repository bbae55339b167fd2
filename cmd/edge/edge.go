package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/cmd/edge/internal/gcpace"
	"github.com/edgelb/edge/cmd/edge/internal/metrics"
	"github.com/edgelb/edge/cmd/edge/internal/poolset"
	"github.com/edgelb/edge/cmd/edge/internal/sdnotify"
	"github.com/edgelb/edge/cmd/edge/internal/sockets"
	"github.com/edgelb/edge/cmd/edge/internal/upgrade"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
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
	fleet  *fleet.Member
	notify *sdnotify.Notifier // the service manager (systemd), if any
	gcTune bool               // serve runs the GC tuner (cmd/edge/internal/gcpace)
	up     *upgrade.Upgrader  // nil: no upgrades (tests building an edge in-process)
	usr2   <-chan os.Signal

	// fleetActions follows the operator's actions of fleet scope under
	// consul.fleet.prefix; nil without one. Fixed at start.
	fleetActions *fleet.Actions

	// Drain progress for /status: when it began (unix nanoseconds, 0
	// before) and how many connections were live then.
	drainStart, drainFrom atomic.Int64
}

// listener is one public port with its own HTTP server and TLS terminator.
type listener struct {
	cfg  conf.Listener
	ln   net.Listener
	srv  *http.Server
	term *edgetls.Terminator // nil for plain ws://
	// conns counts the listener's open client sockets.
	conns proxy.ListenerConns
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
	if e.admin, err = e.newAdmin(cfg); err != nil {
		return nil, err
	}
	if err := e.newFleetActions(cfg); err != nil {
		e.admin.Close()
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

// carriedTicketKeys is the ticket-key state the process that started
// this one carried for the listener (n names it), or nil.
func (e *edge) carriedTicketKeys(n string) []byte {
	b, err := e.up.Carried(n)
	if err != nil {
		e.log.Warn("session ticket keys of the previous process not read; fresh keys start", "err", err)
	}
	return b
}

// listenReusePort binds a public listener (sockets.Listen: SO_REUSEPORT,
// keep-alive and TCP_DEFER_ACCEPT on the listening socket).
func listenReusePort(addr string) (net.Listener, error) { return sockets.Listen(addr) }

func (e *edge) buildListener(cfg *conf.Config, lc conf.Listener) (*listener, error) {
	l := &listener{cfg: lc}
	lo := proxy.ListenerOptions{
		Name:           lc.Name,
		TLS:            lc.TLS != nil,
		TrustedProxies: lc.TrustedProxies,
		Forwarded:      lc.ForwardedHeader,
		StrictSNIHost:  lc.StrictSNIHost,
		// Per read of a plain request body; http.Server's ReadTimeout and
		// WriteTimeout would also bound hijacked WebSockets.
		ReadBodyTimeout: lc.ReadBodyTimeout.Std(),
	}
	if lc.TLS != nil {
		opts := tlsOptions(cfg, lc)
		if st := lc.TLS.SessionTickets; st.ConsulKey != "" && st.Enabled {
			src, err := newConsulTicketKeys(e.dyn.client, st)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
			}
			opts.Tickets.Source = src
		}
		if p := lc.TLS.OCSP.ConsulPrefix; p != "" {
			opts.OCSP.Share = fleet.NewStaples(e.dyn.client, p)
		}
		opts.Logger = e.log.With("listener", lc.Name)
		opts.Observer = e.metrics.TLSObserver(lc.Name)
		carry := "tickets:" + lc.Name
		opts.Tickets.Carried = e.carriedTicketKeys(carry)
		term, err := edgetls.New(opts)
		clear(opts.Tickets.Carried)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
		}
		l.term = term
		// Generated ticket keys go with an upgrade, so the sessions of
		// this process resume on the next (edgetls.Terminator.TicketState).
		e.up.Carry(carry, term.TicketState)
		lo.ClientCertHeader = lc.TLS.ClientCertHeader
	}
	ln, err := e.up.Listen(lc.Address, listenReusePort)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
	}
	if lc.ProxyProtocol.Enabled {
		ln = proxy.ListenProxyProtocol(ln, lc.ProxyProtocol.Trusted, lc.ProxyProtocol.Timeout.Std())
	}
	var connCtx func(context.Context, net.Conn) context.Context
	if l.term != nil {
		// The splice owns the TLS 1.3 records of WebSockets once the
		// handshake is done: proxy.ListenTLS sets it all up.
		tlsCfg := l.term.TLSConfig()
		if os.Getenv("SSLKEYLOGFILE") != "" {
			// crypto/tls does not read it, and its one key log hook is
			// the record layer's (proxy.ListenTLS): say so, not nothing.
			e.log.Warn("SSLKEYLOGFILE is ignored: the TLS key log hook carries edge's record layer", "listener", lc.Name)
		}
		e.metrics.CountHandshakes(lc.Name, tlsCfg)
		tln, cc, err := proxy.ListenTLS(ln, tlsCfg, e.accept, &l.conns)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
		}
		ln, connCtx = tln, cc
	} else {
		ln = proxy.WrapListenerCount(ln, e.accept, &l.conns)
	}
	l.ln = ln
	// net/http bounds the TLS handshake by the smallest of its read
	// timeouts, so the handshake gets min(tls_handshake_timeout,
	// read_header_timeout); a stalled handshake or slow headers close that
	// connection only.
	rht := lc.ReadHeaderTimeout.Std()
	if l.term != nil && lc.TLSHandshakeTimeout.Std() > 0 && lc.TLSHandshakeTimeout.Std() < rht {
		rht = lc.TLSHandshakeTimeout.Std()
	}
	l.srv = &http.Server{
		Handler:           e.proxy.Handler(lo),
		ReadHeaderTimeout: rht,
		MaxHeaderBytes:    lc.MaxHeaderBytes,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          e.metrics.HTTPErrorLog(lc.Name, e.log.With("listener", lc.Name)),
		// OPTIONS * goes to the proxy, which answers it within its answer
		// timeout; net/http's own handler would write with no deadline.
		DisableGeneralOptionsHandler: true,
	}
	l.srv.ConnContext = connCtx
	return l, nil
}

// serve runs the listener's HTTP server until it is shut down.
func (l *listener) serve() error {
	err := l.srv.Serve(l.ln)
	// ErrClosed: the listener closed before Shutdown, when the sockets
	// were handed to a new process (stopAccepting).
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("listener %s: %w", l.cfg.Name, err)
}

func (e *edge) closeListeners() {
	for _, l := range e.listeners {
		_ = l.ln.Close()
	}
}

// serve runs every component until ctx ends, then drains.
func (e *edge) serve(ctx context.Context, hup <-chan os.Signal) error {
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	g, gctx := errgroup.WithContext(bg)
	// The admin listener stops on its own when the listeners are handed
	// over: the new process answers from then on.
	adminCtx, stopAdmin := context.WithCancel(gctx)
	defer stopAdmin()
	if e.gcTune {
		// Until the drain is over: pacing matters during a drain too.
		g.Go(func() error { gcpace.New().Run(gctx); return nil })
	}
	// The readiness runtime before the listeners: the first WebSockets
	// take it too. It stops once the drain closed the proxy.
	g.Go(func() error { return e.proxy.Run(gctx) })
	<-e.proxy.Started()
	for _, l := range e.listeners {
		if l.term != nil {
			g.Go(func() error { return l.term.Run(gctx) })
		}
		g.Go(l.serve)
	}
	e.startDynamic(gctx, g)
	e.runCookieKeys(gctx, g)
	e.runFleetActions(gctx, g)
	if e.fleet != nil {
		g.Go(func() error { return e.fleet.Run(gctx) })
	}
	// Ready before the admin listener answers: a process an upgrade
	// started shares that socket with its parent, and must not answer
	// /readyz 503 to a health check while the parent serves. Until Run
	// starts, admin connections wait in the queue (bound at start).
	e.admin.SetReady(true)
	g.Go(func() error { return e.admin.Run(adminCtx) })
	e.becomeReady(gctx, g)
	if !e.admin.Loopback() {
		e.log.Warn("admin listener is not on loopback: /metrics, /status and the admin API are open to whoever reaches it",
			"admin", e.admin.Addr().String(), "pprof", e.config().Admin.Pprof)
	}

	var failed error
	handedOff := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-gctx.Done():
			failed = context.Cause(gctx)
			break loop
		case <-hup:
			e.sdNotify(e.notify.Reloading())
			status := e.reload()
			e.sdNotify(e.notify.Ready(status))
		case <-e.usr2:
			g.Go(func() error { _ = e.upgrade("", "SIGUSR2"); return nil })
		case <-e.up.HandedOff():
			handedOff = true
			break loop
		}
	}
	if handedOff {
		e.handOver(stopAdmin)
	} else {
		e.drain()
	}
	stopBG()
	if err := g.Wait(); err != nil && failed == nil && !errors.Is(err, context.Canceled) {
		failed = err
	}
	if errors.Is(failed, context.Canceled) {
		failed = nil
	}
	return failed
}

// drain is the graceful stop: readiness off, listeners closed, WebSockets
// sent 1001 spread over the window, the rest closed at the deadline.
// http.Server.Shutdown does not know hijacked connections (traefik#3630),
// hence proxy.Drain.
func (e *edge) drain() {
	e.mu.Lock()
	d := e.cfg.Drain
	e.mu.Unlock()
	e.admin.SetReady(false)
	// No upgrade from here on; one under way is called off.
	e.up.Stop()
	e.drainFrom.Store(int64(e.proxy.Active()))
	e.drainStart.Store(time.Now().UnixNano())
	e.admin.SetDraining()
	e.sdNotify(e.notify.Stopping())
	e.log.Info("draining", "connections", e.proxy.Active(), "delay", d.Delay.String(), "window", d.Window.String(), "timeout", d.Timeout.String())
	if d.Delay > 0 {
		// Keep accepting while whatever is in front of edge notices /readyz.
		time.Sleep(d.Delay.Std())
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout.Std())
	defer cancel()
	e.shutdownAndDrain(ctx, d.Window.Std())
	e.log.Info("drained", "left", e.proxy.Active())
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
	e.mu.Lock()
	pools, err := e.poolBuilder().Build(cfg, e.pools)
	if err == nil {
		err = e.proxy.SetRoutes(append(poolset.Routes(cfg, pools), e.dyn.declaredRoutes(cfg)...))
	}
	if err != nil {
		e.mu.Unlock()
		return refuse(err)
	}
	// Routes now point at the new entries; make their members live, each
	// already with the fleet's actions (a backend the fleet drained that
	// this reload adds is never pickable, not even for a moment).
	for _, ent := range pools {
		e.fleetActions.Prime(ent.Bal)
	}
	gone, applyErr := poolset.Apply(pools)
	e.pools = pools
	e.admin.SetSettings(api)
	old := e.cfg
	e.cfg = cfg
	e.mu.Unlock()
	e.reapplyCookieKeys(cfg, pools)
	e.reapplyFleetActions()
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

// sdNotify logs a failure to reach the service manager; it never stops edge.
func (e *edge) sdNotify(err error) {
	if err != nil {
		e.log.Warn("service manager notification failed", "err", err)
	}
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

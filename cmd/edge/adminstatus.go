package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/cmd/edge/internal/rebalance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/proxy"
)

// adminSettings maps the file onto the admin API's settings; a token that
// cannot be read refuses the file (at start) or the reload. Without a
// token in the file, the one in state_dir is used, generated at the first
// start: writes always need a token, and that file is readable by edge's
// own user alone.
func adminSettings(cfg *conf.Config) (admin.Settings, error) {
	a := cfg.Admin.API
	s := admin.Settings{Enabled: a.Enabled, Write: a.Write, DrainWindow: cfg.Drain.Window.Std(), AllowedHosts: admin.CanonicalHosts(cfg.Admin.AllowedHosts),
		Scope: admin.Scope(a.Scope)}
	tok, err := a.Token()
	if err != nil {
		return admin.Settings{}, err
	}
	s.Token = string(tok)
	if s.Token == "" && a.Enabled && a.Write && cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return admin.Settings{}, fmt.Errorf("state_dir: %w", err)
		}
		if s.Token, err = admin.LoadOrCreateToken(cfg.StateDir); err != nil {
			return admin.Settings{}, err
		}
	}
	return s, nil
}

// newAdmin binds the admin listener (and the metrics listener) of cfg and
// builds the API and the status page over e's components.
func (e *edge) newAdmin(cfg *conf.Config) (*admin.Server, error) {
	s, err := adminSettings(cfg)
	if err != nil {
		return nil, err
	}
	opts := admin.Options{
		Address: cfg.Admin.Address, MetricsAddress: cfg.Metrics.Address, Pprof: cfg.Admin.Pprof,
		Metrics: e.metrics.Handler(),
		Status:  e.status, Pools: e.allPools, Conns: proxyConns{e.proxy}, Settings: s, Log: e.log,
		Bind: func(addr string) (net.Listener, error) {
			return e.up.Listen(addr, func(a string) (net.Listener, error) { return net.Listen("tcp", a) })
		},
	}
	if e.up != nil {
		opts.Endpoints = admin.UpgradeEndpoints(apiUpgrader{e})
	}
	opts.Endpoints = append(opts.Endpoints, e.tokens.Endpoints(cfg.Consul.Fleet.Prefix != "")...)
	ra := &rebalance.API{Pools: e.pool, Runner: e.rebalance}
	if e.fleetControls != nil {
		ra.Store = e.fleetControls
	}
	opts.Endpoints = append(opts.Endpoints, ra.Endpoints()...)
	if cfg.Consul.Fleet.Prefix != "" {
		opts.Fleet = fleetAdmin{e}
	}
	return admin.New(opts)
}

// proxyConns is the proxy as the admin API sees it.
type proxyConns struct{ s *proxy.Server }

// DrainConns implements admin.Conns: RFC 6455 §7.4.1 / IANA 1012 "service
// restart" tells clients to reconnect, which lands them on another backend.
func (p proxyConns) DrainConns(b *balance.Backend, window time.Duration) int {
	return p.s.CloseConnsOn(b, proxy.CloseServiceRestart, window, proxy.ReasonAdminDrain)
}

// Connections implements admin.Conns.
func (p proxyConns) Connections(b *balance.Backend) []admin.Conn {
	var out []admin.Conn
	for _, c := range p.s.Connections(b) {
		out = append(out, admin.Conn{Client: c.Client, Listener: c.Listener, Host: c.Host, Path: c.Path,
			Since: c.Since, In: c.In, Out: c.Out, Closing: c.Closing})
	}
	return out
}

// edgeStatus is e as /status sees it (admin.StatusSource).
type edgeStatus struct{ e *edge }

// Pools implements admin.StatusSource.
func (s edgeStatus) Pools() []*balance.Pool { return s.e.allPools() }

// StatusParts implements admin.StatusSource. A part e does not have stays
// nil, not a typed nil or an empty list, so /status leaves it out.
func (s edgeStatus) StatusParts() admin.StatusParts {
	e := s.e
	bi := currentBuild()
	p := admin.StatusParts{
		Version: bi.Version, Revision: bi.Revision, GoVersion: bi.GoVersion, PID: os.Getpid(),
		Active: e.proxy.Active(), TLS: map[string]any{}, Listeners: e.listenerDocs(), Routes: e.routeDocs(), Drain: e.drainDoc(),
		Discovery: e.discoveryStatus(),
	}
	if e.up != nil {
		p.Upgrade = e.up.State()
	}
	for _, l := range e.listeners {
		if l.term != nil {
			p.TLS[l.cfg.Name] = l.term.Status()
		}
	}
	if ck := e.cookieKeyStatus(); len(ck) > 0 {
		p.CookieKeys = ck
	}
	if st := e.tokens.Status(); len(st.Providers) > 0 || st.Revocations["local"]+st.Revocations["fleet"]+st.Revocations["file"] > 0 {
		p.Auth = st
	}
	if rb := e.rebalance.Status(); len(rb) > 0 {
		p.Rebalance = rb
	}
	if fa := e.fleetStatus(); fa != nil {
		p.FleetActions = fa
	}
	if e.fleetControls != nil {
		st := e.fleetControls.Status()
		p.FleetControls = &st
	}
	if f := newFleetDoc(e.fleet); f != nil {
		p.Fleet = f
		if t := f.Snapshot.Totals(); len(t) > 0 {
			p.FleetTotals = t
		}
	}
	return p
}

func (e *edge) listenerDocs() []admin.ListenerStatus {
	out := []admin.ListenerStatus{}
	for _, l := range e.listeners {
		out = append(out, admin.ListenerStatus{Name: l.cfg.Name, Address: l.ln.Addr().String(), TLS: l.term != nil})
	}
	return out
}

func (e *edge) routeDocs() []admin.RouteStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []admin.RouteStatus{}
	for _, r := range e.cfg.Routes {
		out = append(out, admin.RouteStatus{Hosts: r.Hosts, PathPrefix: r.PathPrefix, Default: r.Default, Pool: r.Pool})
	}
	return out
}

func (e *edge) drainDoc() admin.DrainStatus {
	d := admin.DrainStatus{Left: int64(e.proxy.Active())}
	if ns := e.drainStart.Load(); ns != 0 {
		d.Draining, d.Started, d.From = true, time.Unix(0, ns).UTC(), e.drainFrom.Load()
	}
	return d
}

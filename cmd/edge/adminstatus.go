package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/internal/admin"
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
		opts.Endpoints = e.upgradeEndpoints()
	}
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

// addAdminStatus adds what the admin API sets, and the ejection count, to
// a backend's /status entry.
func addAdminStatus(m map[string]any, b *balance.Backend) {
	m["admin_state"] = b.AdminState().String()
	m["declared_weight"] = b.DeclaredWeight()
	m["weight_overridden"] = b.WeightOverridden()
	if _, ok := m["ejections"]; !ok {
		m["ejections"] = b.Ejections()
	}
}

// listenerDoc is one public listener in /status.
type listenerDoc struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	TLS     bool   `json:"tls"`
}

func (e *edge) listenerDocs() []listenerDoc {
	out := []listenerDoc{}
	for _, l := range e.listeners {
		out = append(out, listenerDoc{Name: l.cfg.Name, Address: l.ln.Addr().String(), TLS: l.term != nil})
	}
	return out
}

// routeDoc is one route of the file in /status; routes declared through
// Consul are under discovery.
type routeDoc struct {
	Hosts      []string `json:"hosts,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	Default    bool     `json:"default,omitempty"`
	Pool       string   `json:"pool"`
}

func (e *edge) routeDocs() []routeDoc {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []routeDoc{}
	for _, r := range e.cfg.Routes {
		out = append(out, routeDoc{Hosts: r.Hosts, PathPrefix: r.PathPrefix, Default: r.Default, Pool: r.Pool})
	}
	return out
}

// drainDoc is the progress of a graceful stop.
type drainDoc struct {
	Draining bool      `json:"draining"`
	Started  time.Time `json:"started,omitzero"`
	// From is how many connections were live when the drain began; Left
	// how many still are.
	From int64 `json:"connections_at_start"`
	Left int64 `json:"connections_left"`
}

func (e *edge) drainDoc() drainDoc {
	d := drainDoc{Left: int64(e.proxy.Active())}
	if ns := e.drainStart.Load(); ns != 0 {
		d.Draining, d.Started, d.From = true, time.Unix(0, ns).UTC(), e.drainFrom.Load()
	}
	return d
}

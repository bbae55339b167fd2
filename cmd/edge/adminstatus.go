package main

import (
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
)

// setupAdminAPI builds the admin API and the status page on e.admin.
func (e *edge) setupAdminAPI(cfg *conf.Config) error {
	s, err := newAPISettings(cfg)
	if err != nil {
		return err
	}
	api := &adminAPI{pools: e.allPools, conns: e.proxy, loopback: isLoopbackListener(e.admin.listener)}
	api.settings.Store(s)
	if e.up != nil {
		api.upgrade = e.apiUpgrade
	}
	e.admin.api = api
	e.admin.page = newStatusPage(e.status)
	if s.enabled && s.write && s.token == "" && !api.loopback {
		e.log.Warn("admin listener is not loopback and admin.api has no token: write operations are refused", "admin", cfg.Admin.Address)
	}
	return nil
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

package rebalance

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
)

// Store keeps the pools' canaries and pauses of fleet scope, for every
// edge (fleet.Controls).
type Store interface {
	// Put stores pool's canary (nil: none) and pause for the fleet, and
	// applies them here.
	Put(ctx context.Context, pool string, canary *balance.Canary, paused bool) error
}

// API is the admin endpoints of canaries and pauses:
//
//	GET  /api/v1/pools/{pool}/canary             the canary of each scope, in force, its progress
//	POST /api/v1/pools/{pool}/canary?scope=      {"version","share","rate"}: set it (share 1 promotes, 0 rolls back)
//	POST /api/v1/pools/{pool}/canary/clear?scope= remove it
//	POST /api/v1/pools/{pool}/rebalance/pause?scope=, .../resume
//
// A write of local scope sets the pool's local layer (this edge, until it
// ends); of fleet scope, the Store (every edge, across restarts). Without
// ?scope=, fleet when the edge has a fleet.
type API struct {
	// Pools returns the running pool of that name, or nil.
	Pools func(name string) *balance.Pool
	// Store is nil without a fleet.
	Store  Store
	Runner *Runner
}

// Endpoints lists the API's routes.
func (a *API) Endpoints() []admin.Endpoint {
	const p = "/api/v1/pools/{pool}"
	return []admin.Endpoint{
		{Method: "GET", Path: p + "/canary", Access: admin.Read, Handle: a.get},
		{Method: "POST", Path: p + "/canary", Access: admin.Write, Handle: a.setCanary},
		{Method: "POST", Path: p + "/canary/clear", Access: admin.Write, Handle: a.clearCanary},
		{Method: "POST", Path: p + "/rebalance/pause", Access: admin.Write, Handle: a.pause(true)},
		{Method: "POST", Path: p + "/rebalance/resume", Access: admin.Write, Handle: a.pause(false)},
	}
}

// canaryDoc is a pool's canaries and pauses, as GET answers.
type canaryDoc struct {
	Pool        string          `json:"pool"`
	Local       *balance.Canary `json:"local"`
	Fleet       *balance.Canary `json:"fleet"`
	InForce     *balance.Canary `json:"in_force"`
	LocalPaused bool            `json:"local_paused"`
	FleetPaused bool            `json:"fleet_paused"`
	// Progress is the pool's rebalancing and the canary's share of the
	// fleet's live connections, as of the last tick.
	Progress *Status `json:"progress,omitempty"`
}

func (a *API) pool(r *http.Request) (*balance.Pool, error) {
	name := r.PathValue("pool")
	p := a.Pools(name)
	if p == nil {
		return nil, admin.Errorf(http.StatusNotFound, "no pool %q", name)
	}
	return p, nil
}

func (a *API) doc(p *balance.Pool) canaryDoc {
	d := canaryDoc{Pool: p.Name(), Local: p.Layer(balance.Local).Canary(), Fleet: p.Layer(balance.Fleet).Canary(),
		InForce: p.Canary(), LocalPaused: p.Layer(balance.Local).Paused(), FleetPaused: p.Layer(balance.Fleet).Paused()}
	for _, st := range a.Runner.Status() {
		if st.Pool == p.Name() {
			d.Progress = &st
		}
	}
	return d
}

func (a *API) get(r *http.Request) (any, error) {
	p, err := a.pool(r)
	if err != nil {
		return nil, err
	}
	return a.doc(p), nil
}

// scope is the write's scope: ?scope=local|fleet, else fleet when there
// is one.
func (a *API) scope(r *http.Request) (admin.Scope, error) {
	switch s := admin.Scope(r.URL.Query().Get("scope")); {
	case s == "" && a.Store != nil:
		return admin.ScopeFleet, nil
	case s == "":
		return admin.ScopeLocal, nil
	case s == admin.ScopeFleet && a.Store == nil:
		return "", admin.Errorf(http.StatusConflict, "scope fleet needs consul.fleet.prefix, the Consul KV prefix the fleet shares")
	case s == admin.ScopeLocal || s == admin.ScopeFleet:
		return s, nil
	default:
		return "", admin.Errorf(http.StatusBadRequest, "scope %q: want local or fleet", s)
	}
}

// set applies canary and paused to p in scope s.
func (a *API) set(r *http.Request, p *balance.Pool, s admin.Scope, canary *balance.Canary, paused bool) (any, error) {
	if cur := layerOf(p, s).Canary(); canary != nil && (cur == nil || *cur != *canary) {
		// Only a new canary is refused: a pause must work whatever the
		// layer holds.
		if p.Mode() == balance.ClientIP {
			return nil, admin.Errorf(http.StatusConflict, "pool %q balances by client_ip: its hash, not weights, places a client, so a canary there would move clients who come straight back", p.Name())
		}
		if err := canary.Check(); err != nil {
			return nil, admin.Errorf(http.StatusBadRequest, "%v", err)
		}
	}
	if s == admin.ScopeLocal {
		l := p.Layer(balance.Local)
		if err := l.SetCanary(canary); err != nil {
			return nil, admin.Errorf(http.StatusBadRequest, "%v", err)
		}
		l.SetPaused(paused)
		return a.doc(p), nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := a.Store.Put(ctx, p.Name(), canary, paused); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, admin.Errorf(http.StatusGatewayTimeout, "fleet scope: %v", err)
		}
		return nil, admin.Errorf(http.StatusServiceUnavailable, "fleet scope: %v", err)
	}
	return a.doc(p), nil
}

// layerOf is p's layer of scope s.
func layerOf(p *balance.Pool, s admin.Scope) *balance.Layer {
	if s == admin.ScopeFleet {
		return p.Layer(balance.Fleet)
	}
	return p.Layer(balance.Local)
}

// target is a write's pool and scope, its body decoded into body.
func (a *API) target(r *http.Request, body any) (*balance.Pool, admin.Scope, error) {
	p, err := a.pool(r)
	if err != nil {
		return nil, "", err
	}
	s, err := a.scope(r)
	if err != nil {
		return nil, "", err
	}
	return p, s, admin.DecodeBody(r, body)
}

func (a *API) setCanary(r *http.Request) (any, error) {
	var c balance.Canary
	p, s, err := a.target(r, &c)
	if err != nil {
		return nil, err
	}
	return a.set(r, p, s, &c, layerOf(p, s).Paused())
}

func (a *API) clearCanary(r *http.Request) (any, error) {
	p, s, err := a.target(r, &struct{}{})
	if err != nil {
		return nil, err
	}
	return a.set(r, p, s, nil, layerOf(p, s).Paused())
}

func (a *API) pause(paused bool) admin.Handler {
	return func(r *http.Request) (any, error) {
		p, s, err := a.target(r, &struct{}{})
		if err != nil {
			return nil, err
		}
		return a.set(r, p, s, layerOf(p, s).Canary(), paused)
	}
}

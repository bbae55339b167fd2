package admin

import (
	"time"

	"github.com/edgelb/edge/balance"
)

// StatusSource is the edge as /status sees it; cmd/edge implements it.
// The pools are rendered here (BuildStatus); every other part is the
// owning component's own status value, which this package does not know.
type StatusSource interface {
	// Pools are the running pools, in the order to show them.
	Pools() []*balance.Pool
	// StatusParts is everything else /status says, read now.
	StatusParts() StatusParts
}

// StatusParts are the parts of /status that are not the pools. A part
// that is nil is left out of the document (hence any, not a typed nil
// pointer or an empty slice, for the optional ones).
type StatusParts struct {
	Version, Revision, GoVersion string
	PID                          int
	// Active is the number of live WebSockets.
	Active int
	// TLS is each TLS listener's terminator status, by listener name.
	TLS map[string]any
	// Discovery is the Consul watchers' status.
	Discovery any
	// CookieKeys are the pools' signing keys kept in Consul KV.
	CookieKeys any
	// FleetActions are the operator's actions of fleet scope.
	FleetActions any
	// Fleet is this edge's part in the fleet's load (consul.fleet).
	Fleet any
	// FleetTotals sums every edge's published record per pool and
	// backend.
	FleetTotals any
	// Auth is the token providers' keys and the revocations in force.
	Auth any
	// Rebalance is each pool's rebalancing of live connections, and its
	// canary's progress.
	Rebalance any
	// FleetControls are the pools' canaries and pauses of fleet scope.
	FleetControls any
	Listeners     []ListenerStatus
	Routes        []RouteStatus
	Drain         DrainStatus
	// Upgrade is the process upgrade's state; "" without upgrades.
	Upgrade string
}

// ListenerStatus is one public listener in /status.
type ListenerStatus struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	TLS     bool   `json:"tls"`
}

// RouteStatus is one route of the file in /status; routes declared
// through Consul are under discovery.
type RouteStatus struct {
	Hosts      []string `json:"hosts,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	Default    bool     `json:"default,omitempty"`
	Pool       string   `json:"pool"`
}

// DrainStatus is the progress of a graceful stop.
type DrainStatus struct {
	Draining bool      `json:"draining"`
	Started  time.Time `json:"started,omitzero"`
	// From is how many connections were live when the drain began; Left
	// how many still are.
	From int64 `json:"connections_at_start"`
	Left int64 `json:"connections_left"`
}

// PoolStatus is one pool in /status.
type PoolStatus struct {
	Name string `json:"name"`
	// The ejection cap: the configured share, what it allows now, and
	// how many members are out.
	MaxEjectionPercent int              `json:"max_ejection_percent"`
	MaxEjected         int              `json:"max_ejected"`
	Ejected            int              `json:"ejected"`
	Backends           []map[string]any `json:"backends"`
}

// StatusDoc is the /status document; the status page renders its JSON.
// Field names are an interface: operators' scripts, edge -upgrade and the
// status page read them.
type StatusDoc struct {
	Version      string           `json:"version"`
	PID          int              `json:"pid"`
	Revision     string           `json:"revision"`
	GoVersion    string           `json:"go_version"`
	Active       int              `json:"active_connections"`
	Pools        []PoolStatus     `json:"pools"`
	TLS          map[string]any   `json:"tls,omitempty"`
	Discovery    any              `json:"discovery,omitempty"`
	CookieKeys   any              `json:"cookie_keys,omitempty"`
	FleetActions any              `json:"fleet_actions,omitempty"`
	Fleet        any              `json:"fleet,omitempty"`
	Listeners    []ListenerStatus `json:"listeners"`
	Routes       []RouteStatus    `json:"routes"`
	Drain        DrainStatus      `json:"drain"`
	Upgrade      string           `json:"upgrade,omitempty"`
	FleetTotals  any              `json:"fleet_totals,omitempty"`
	Auth         any              `json:"auth,omitempty"`
	Rebalance    any              `json:"rebalance,omitempty"`
	// FleetControls are the pools' canaries and pauses of fleet scope.
	FleetControls any `json:"fleet_controls,omitempty"`
}

// BuildStatus is the /status document of src, read now.
func BuildStatus(src StatusSource) StatusDoc {
	p := src.StatusParts()
	doc := StatusDoc{
		Version: p.Version, PID: p.PID, Revision: p.Revision, GoVersion: p.GoVersion, Active: p.Active,
		TLS: p.TLS, Discovery: p.Discovery, CookieKeys: p.CookieKeys, FleetActions: p.FleetActions, Fleet: p.Fleet,
		Listeners: p.Listeners, Routes: p.Routes, Drain: p.Drain, Upgrade: p.Upgrade, FleetTotals: p.FleetTotals, Auth: p.Auth, Rebalance: p.Rebalance,
		FleetControls: p.FleetControls,
	}
	if doc.Listeners == nil {
		doc.Listeners = []ListenerStatus{}
	}
	if doc.Routes == nil {
		doc.Routes = []RouteStatus{}
	}
	for _, pool := range src.Pools() {
		doc.Pools = append(doc.Pools, poolStatus(pool))
	}
	return doc
}

// poolStatus is pool's entry: its ejection cap, its members, and the
// backends that left but still hold connections ("draining" while their
// clients are being sent 1012, "left" when they are kept).
func poolStatus(p *balance.Pool) PoolStatus {
	ps := PoolStatus{Name: p.Name(), MaxEjectionPercent: p.MaxEjectionPercent(), MaxEjected: p.MaxEjected(), Ejected: p.Ejected()}
	for _, b := range p.Snapshot().Backends {
		ps.Backends = append(ps.Backends, memberStatus(b))
	}
	for _, b := range p.Retired() {
		state := "left"
		if _, ok := b.Draining(); ok {
			state = "draining"
		}
		ps.Backends = append(ps.Backends, map[string]any{
			"id": b.ID(), "address": b.Addr(), "active": b.Active(), "available": false, "state": state,
		})
	}
	return ps
}

// memberStatus is a member's entry, with what the admin API sets and,
// during slow start, its share and end.
func memberStatus(b *balance.Backend) map[string]any {
	m := map[string]any{
		"id": b.ID(), "address": b.Addr(), "weight": b.Weight(), "active": b.Active(),
		"healthy": b.Healthy(), "ejected": b.Ejected(), "available": b.Available(), "state": "member",
		"ejections": b.Ejections(), "ejections_refused": b.EjectionsRefused(),
		"admin_state": b.AdminState().String(), "declared_weight": b.DeclaredWeight(), "weight_overridden": b.WeightOverridden(),
	}
	if until, ok := b.SlowStart(); ok {
		m["slow_start_share"], m["slow_start_until"] = b.SlowStartShare(), until
	}
	if v := b.Version(); v != "" {
		m["version"] = v
	}
	if b.Shedding() {
		m["shedding"] = true
	}
	return m
}

package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/metrics"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/fleet"
)

// fleetEdgeID names this edge in the fleet: consul.fleet.id, or the host
// name and the admin address the file gives (known before the admin
// listener is bound, so the fleet load, the upgrade slots and the fleet
// actions all use the same name).
func fleetEdgeID(cfg *conf.Config) string {
	if id := cfg.Consul.Fleet.ID; id != "" {
		return id
	}
	host, _ := os.Hostname()
	return discovery.ServiceIDPart(host + "-" + cfg.Admin.Address)
}

// newFleet makes this edge's member of the fleet's load, or nil without
// consul.fleet.prefix.
func (e *edge) newFleet(cfg *conf.Config) error {
	fc := cfg.Consul.Fleet
	if fc.Prefix == "" {
		return nil
	}
	m, err := fleet.NewMember(fleet.MemberOptions{
		Client: e.dyn.client, Prefix: fc.Prefix, ID: fleetEdgeID(cfg), Host: fleetHost{e},
		PublishEvery: fc.PublishEvery.Std(), SessionTTL: fc.SessionTTL.Std(), StaleAfter: fc.StaleAfter.Std(),
		Logger: e.log,
	})
	if err != nil {
		return fmt.Errorf("consul.fleet: %w", err)
	}
	e.fleet = m
	e.metrics.WatchFleet(metrics.Fleet{Status: m.Status, Shares: func() []metrics.FleetShare { return metricShares(m) }})
	return nil
}

// fleetHost is the edge as the fleet sees it: its pools and their limits
// of fleet scope (fleet.Host), a pool by name and the proxy's drain of a
// backend's connections (fleet.ActionTarget).
type fleetHost struct{ e *edge }

var (
	_ fleet.Host         = fleetHost{}
	_ fleet.ActionTarget = fleetHost{}
)

// Pool implements fleet.ActionTarget.
func (h fleetHost) Pool(name string) *balance.Pool {
	for _, p := range h.e.allPools() {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// DrainConns implements fleet.ActionTarget: the local drain's 1012 spread
// over the window.
func (h fleetHost) DrainConns(b *balance.Backend, window time.Duration) int {
	return proxyConns{h.e.proxy}.DrainConns(b, window)
}

// Pools implements fleet.Host: the file's pools with their fleet-scope
// limits, and the pools the registry declared (which have none).
func (h fleetHost) Pools() []fleet.Pool {
	e := h.e
	e.mu.Lock()
	out := make([]fleet.Pool, 0, len(e.pools))
	for _, ent := range e.pools {
		fp := ent.FleetPool()
		if a := ent.Spec.Auth; a.MaxConnectionsPerSubject > 0 && a.MaxConnectionsPerSubjectScope == conf.ScopeFleet {
			fp.Subjects = subjectCounts{e: e, pool: fp.Name, limit: a.MaxConnectionsPerSubject}
		}
		out = append(out, fp)
	}
	e.mu.Unlock()
	// By name, then the declared pools, as allPools lists them.
	slices.SortFunc(out, func(a, b fleet.Pool) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range e.dyn.pools() {
		out = append(out, fleet.Pool{Name: p.Name(), Pool: p})
	}
	return out
}

// Self implements fleet.Host.
func (h fleetHost) Self() fleet.Record {
	e := h.e
	r := fleet.Record{Version: currentBuild().Version, PID: os.Getpid(), Ready: e.ready(), Connections: int64(e.proxy.Active())}
	if e.admin != nil {
		r.Address = e.admin.Addr().String()
	}
	return r
}

// ready is what /readyz answers.
func (e *edge) ready() bool { return e.admin != nil && e.admin.Ready() }

// fleetDoc is /status's view of the fleet: this edge's place in it, every
// edge's record as last read, and the shares applied.
type fleetDoc struct {
	fleet.LoadStatus
	Snapshot *fleet.Snapshot    `json:"snapshot"`
	Limits   []fleet.PoolLimits `json:"limits"`
}

// newFleetDoc is the fleet's /status entry; nil without a fleet.
func newFleetDoc(m *fleet.Member) *fleetDoc {
	if m == nil {
		return nil
	}
	return &fleetDoc{LoadStatus: m.Status(), Snapshot: m.Snapshot(), Limits: m.Limits()}
}

// metricShares are the shares of fleet-scope limits the last apply set,
// for the metrics.
func metricShares(m *fleet.Member) []metrics.FleetShare {
	var out []metrics.FleetShare
	for _, l := range m.Limits() {
		for id, n := range l.Backends {
			out = append(out, metrics.FleetShare{Pool: l.Pool, Backend: id, Share: n})
		}
	}
	return out
}

// subjectCounts is a pool's per-subject counts as the fleet sees them
// (fleet.SubjectSource): this edge publishes the subjects holding at least
// an eighth of the limit, so a subject is counted over the fleet to within
// an eighth of the limit per edge, and Consul's writes do not grow with
// the number of users.
type subjectCounts struct {
	e     *edge // its proxy is built after the fleet's member
	pool  string
	limit int
}

// Heavy implements fleet.SubjectSource.
func (c subjectCounts) Heavy() []fleet.SubjectLoad {
	if c.e.proxy == nil {
		return nil
	}
	var out []fleet.SubjectLoad
	for _, sc := range c.e.proxy.HeavySubjects(c.pool, max(1, c.limit/8), fleet.MaxSubjects) {
		out = append(out, fleet.SubjectLoad{Subject: fleet.SubjectKey(sc.Subject), Conns: sc.Conns})
	}
	slices.SortFunc(out, func(a, b fleet.SubjectLoad) int { return strings.Compare(a.Subject, b.Subject) })
	return out
}

// SetFleet implements fleet.SubjectSource.
func (c subjectCounts) SetFleet(others map[uint64]int64) {
	if c.e.proxy != nil {
		c.e.proxy.SetFleetSubjects(c.pool, others)
	}
}

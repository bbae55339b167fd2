package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/metrics"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/fleet"
	"golang.org/x/sync/errgroup"
)

// fleet is this edge's part in the fleet's load: its record, published
// and followed by fleet.Load, and the shares of fleet-scope
// limits fleet.Shares applies to its pools after every answer.
type fleetPart struct {
	e      *edge
	fl     *fleet.Load
	shares *fleet.Shares
}

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

// newFleet makes the fleet load of cfg, or nil without consul.fleet.prefix.
func (e *edge) newFleet(cfg *conf.Config) error {
	fc := cfg.Consul.Fleet
	if fc.Prefix == "" {
		return nil
	}
	f := &fleetPart{e: e, shares: fleet.NewShares(e.log)}
	fl, err := fleet.NewLoad(fleet.LoadOptions{
		Client: e.dyn.client, Prefix: fc.Prefix, ID: fleetEdgeID(cfg),
		Collect: f.collect, Known: f.known, Published: func(r fleet.Record) { f.shares.Published(r, f.e.allPools()) },
		PublishEvery: fc.PublishEvery.Std(), SessionTTL: fc.SessionTTL.Std(), StaleAfter: fc.StaleAfter.Std(),
		Logger: e.log,
	})
	if err != nil {
		return fmt.Errorf("consul.fleet: %w", err)
	}
	f.fl = fl
	e.fleet = f
	e.metrics.WatchFleet(metrics.Fleet{Status: fl.Status, Shares: f.metricShares})
	// Shares from the first connection: the fallback until Consul answers.
	f.apply()
	return nil
}

// run publishes, follows and applies on g until ctx ends.
func (f *fleetPart) run(ctx context.Context, g *errgroup.Group) {
	if f == nil {
		return
	}
	g.Go(func() error { return f.fl.Run(ctx) })
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-f.fl.Changed():
				f.apply()
			}
		}
	})
}

// known accepts the pools this edge serves and their members: a record
// naming anything else is cut to what this edge has.
func (f *fleetPart) known(pool, backend string) bool {
	for _, p := range f.e.allPools() {
		if p.Name() != pool {
			continue
		}
		if backend == "" {
			return true
		}
		return slices.ContainsFunc(p.Snapshot().Backends, func(b *balance.Backend) bool { return b.ID() == backend })
	}
	return false
}

// collect is this edge's record now.
func (f *fleetPart) collect() fleet.Record {
	r := fleet.Record{Version: currentBuild().Version, PID: os.Getpid(), Ready: f.e.ready(), Connections: int64(f.e.proxy.Active())}
	if f.e.admin != nil {
		r.Address = f.e.admin.Addr().String()
	}
	r.Pools = f.shares.Loads(f.e.allPools(), time.Now())
	return r
}

// ready is what /readyz answers.
func (e *edge) ready() bool { return e.admin != nil && e.admin.Ready() }

// apply sets every fleet-scope limit's share from the fleet as last read,
// or the fallback when that is stale.
func (f *fleetPart) apply() {
	st := f.fl.Status()
	snap := f.fl.Snapshot()
	f.e.mu.Lock()
	pools := make([]fleet.Pool, 0, len(f.e.pools))
	for _, ent := range f.e.pools {
		lim := ent.spec.fleet
		pools = append(pools, fleet.Pool{
			Name: ent.spec.name, Pool: ent.bal, Admit: ent.admit,
			MaxConnectionsPerBackend: lim.conns, ConnectionRate: lim.rate, ConnectionBurst: lim.burst,
		})
	}
	f.e.mu.Unlock()
	f.shares.Apply(st, snap, pools)
}

// fleetDoc is /status's view of the fleet: this edge's place in it, every
// edge's record as last read, and the shares applied.
type fleetDoc struct {
	fleet.LoadStatus
	Snapshot *fleet.Snapshot    `json:"snapshot"`
	Limits   []fleet.PoolLimits `json:"limits"`
}

// doc is the fleet's /status entry; nil without a fleet.
func (f *fleetPart) doc() *fleetDoc {
	if f == nil {
		return nil
	}
	return &fleetDoc{LoadStatus: f.fl.Status(), Snapshot: f.fl.Snapshot(), Limits: f.shares.Limits()}
}

// metricShares are the shares of fleet-scope limits the last apply set,
// for the metrics.
func (f *fleetPart) metricShares() []metrics.FleetShare {
	var out []metrics.FleetShare
	for _, l := range f.shares.Limits() {
		for id, n := range l.Backends {
			out = append(out, metrics.FleetShare{Pool: l.Pool, Backend: id, Share: n})
		}
	}
	return out
}

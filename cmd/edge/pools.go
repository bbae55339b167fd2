package main

import (
	"slices"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/poolset"
	"github.com/edgelb/edge/conf"
)

// backendsLeft applies the pool's backend_leave to backends that left it
// for good (removed from the file, gone from Consul or in maintenance
// there; never a failing check): with drain, their clients get close 1012
// spread over the window so they reconnect to the others at a bounded
// rate; with keep, they stay. Either way they count in the gauges until
// they close (balance.Pool.Retired).
func (e *edge) backendsLeft(d poolset.Departure) {
	for _, b := range d.Left {
		if b.Active() <= 0 {
			continue
		}
		if d.Leave.Connections == conf.LeaveKeep {
			e.log.Info("backend left the pool; keeping its connections", "pool", d.Pool, "backend", b.ID(), "address", b.Addr(), "connections", b.Active())
			continue
		}
		n := e.proxy.CloseBackend(b, d.Leave.Window.Std())
		e.log.Info("backend left the pool; closing its connections with 1012", "pool", d.Pool, "backend", b.ID(), "address", b.Addr(), "connections", n, "window", d.Leave.Window.String())
	}
}

// goneFromRegistry is a discovered pool's discovery.WatcherOptions.OnGone:
// ids left the registry, and their backends, already out of the pool, are
// among its retired ones if they still hold connections. leave is the
// pool's backend_leave when it is not (or no longer) one of the file's.
func (e *edge) goneFromRegistry(pool string, bal *balance.Pool, leave conf.BackendLeave, ids []string) {
	e.mu.Lock()
	if ent := e.pools[pool]; ent != nil {
		leave = ent.Spec.Leave
	}
	e.mu.Unlock()
	d := poolset.Departure{Pool: pool, Leave: leave}
	for _, b := range bal.Retired() {
		if slices.Contains(ids, b.ID()) {
			d.Left = append(d.Left, b)
		}
	}
	e.backendsLeft(d)
}

// logEjection writes one line per ejection, and one when the cap (or the
// rule that the last available backend stays) first keeps a failing
// backend in.
func (e *edge) logEjection(ev balance.EjectEvent) {
	if ev.Refused {
		e.log.Warn("backend failing but not ejected: ejection cap reached or last available backend",
			"pool", ev.Pool, "backend", ev.Backend.ID(), "address", ev.Backend.Addr(), "reason", ev.Reason,
			"ejected", ev.Ejected, "max_ejected", ev.Max)
		return
	}
	e.log.Warn("backend ejected", "pool", ev.Pool, "backend", ev.Backend.ID(), "address", ev.Backend.Addr(),
		"reason", ev.Reason, "until", ev.Until.UTC().Format(time.RFC3339), "ejected", ev.Ejected, "max_ejected", ev.Max)
}

// poolBuilder builds the pools of a file, logging to edge's log, each
// with its name's fleet layer when edge has fleet actions.
func (e *edge) poolBuilder() poolset.Builder {
	b := poolset.Builder{Log: e.log, OnEject: e.logEjection}
	if e.fleetActions != nil {
		b.Fleet = e.fleetActions.Layer
	}
	if e.tokens != nil {
		b.Auth = e.tokens.PoolAuth
	}
	return b
}

package main

import (
	"context"
	"errors"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"golang.org/x/sync/errgroup"
)

// newFleetActions follows the fleet's operator actions when the file names
// a fleet prefix, and reads them once, before the pools are built (each is
// built with its name's fleet layer, fleet.Actions.Layer) and bounded by fleet.StartWait,
// before edge serves: what the fleet drained stays drained across this
// edge's restart.
func (e *edge) newFleetActions(cfg *conf.Config) error {
	p := cfg.Consul.Fleet.Prefix
	if p == "" {
		return nil
	}
	// A client of its own, so an answer on the prefix is bounded before it
	// is decoded: whoever writes the prefix cannot make edge read without
	// bound.
	client, err := newConsulClient(cfg, fleet.MaxActionsResponse)
	if err != nil {
		return err
	}
	fa, err := fleet.NewActions(fleet.ActionsOptions{
		Client: client, Prefix: p, Edge: fleetEdgeID(cfg), Target: fleetHost{e}, Logger: e.log,
		StateDir: cfg.StateDir,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleet.StartWait)
	defer cancel()
	if err := fa.Load(ctx); err != nil {
		e.log.Warn("fleet actions not read from consul yet: applied once it answers", "prefix", p, "err", err)
	}
	e.fleetActions = fa
	e.metrics.WatchFleetActions(fa.Status)
	// The pools' canaries and pauses, on the same fleet layers.
	fc, err := fleet.NewControls(fleet.ControlsOptions{Client: client, Prefix: p, Edge: fleetEdgeID(cfg),
		Layers: fa.Layer, Logger: e.log, StateDir: cfg.StateDir})
	if err != nil {
		return err
	}
	if err := fc.Load(ctx); err != nil {
		e.log.Warn("fleet canaries not read from consul yet: applied once it answers", "prefix", p, "err", err)
	}
	e.fleetControls = fc
	return nil
}

// runFleetActions follows the fleet's actions on g.
func (e *edge) runFleetActions(ctx context.Context, g *errgroup.Group) {
	if e.fleetActions != nil {
		g.Go(func() error { return e.fleetActions.Run(ctx) })
		g.Go(func() error { return e.fleetControls.Run(ctx) })
	}
}

// fleetStatus is /status's view of the fleet's actions; nil without a
// fleet prefix.
func (e *edge) fleetStatus() *fleet.ActionsStatus {
	if e.fleetActions == nil {
		return nil
	}
	s := e.fleetActions.Status()
	return &s
}

// fleetAdmin is the admin API's store of fleet scope.
type fleetAdmin struct{ e *edge }

// Act implements admin.Fleet.
func (f fleetAdmin) Act(ctx context.Context, pool, backend string, c admin.Change) (int, error) {
	fa := f.e.fleetActions
	if fa == nil {
		return 0, errors.New("no fleet prefix")
	}
	_, n, err := fa.Act(ctx, pool, backend, func(a *fleet.Action) {
		if c.State != nil {
			a.State = *c.State
			if *c.State == balance.AdminDrain {
				// Every drain request is a new drain: its clients get
				// 1012 again, as the local drain does.
				a.Window, a.DrainAt = c.Window, time.Time{}
			}
		}
		if c.Weight != nil {
			a.Weight = *c.Weight
		}
	})
	return n, err
}

var _ admin.Fleet = fleetAdmin{}

package main

import (
	"context"
	"fmt"

	"github.com/edgelb/edge/cmd/edge/internal/metrics"
	"github.com/edgelb/edge/cmd/edge/internal/tokens"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"golang.org/x/sync/errgroup"
)

// newTokens builds the token component of cfg and fetches its providers'
// keys once, bounded like the fleet's first read: a provider whose keys
// cannot be had yet is logged, and its pools refuse tokens until a
// refresh brings them. With a fleet prefix, the fleet's revocations are
// read too, before edge serves, so a revoked subject is refused from the
// first request.
func (e *edge) newTokens(cfg *conf.Config) error {
	t, err := tokens.New(&cfg.Auth, tokens.Options{Log: e.log, StateDir: cfg.StateDir})
	if err != nil {
		return err
	}
	e.tokens = t
	ctx, cancel := context.WithTimeout(context.Background(), fleet.StartWait)
	defer cancel()
	if err := t.Load(ctx); err != nil {
		e.log.Warn("auth: keys not loaded yet; the pools refuse tokens of these providers until they are", "err", err)
	}
	if p := cfg.Consul.Fleet.Prefix; p != "" {
		client, err := newConsulClient(cfg, 1<<20)
		if err != nil {
			return err
		}
		fr, err := fleet.NewRevocations(fleet.RevocationsOptions{Client: client, Prefix: p, Target: t,
			StateDir: cfg.StateDir, Logger: e.log, MaxUntil: tokens.MaxUntil(&cfg.Auth)})
		if err != nil {
			return fmt.Errorf("consul.fleet: %w", err)
		}
		if err := fr.Load(ctx); err != nil {
			e.log.Warn("fleet revocations not read from consul yet", "prefix", p, "err", err)
		}
		t.SetFleetStore(fr)
		e.fleetRevocations = fr
	}
	e.metrics.WatchAuth(func() metrics.AuthState {
		st := t.Status()
		out := metrics.AuthState{Revocations: st.Revocations}
		for _, p := range st.Providers {
			k := p.Keys
			k.Name = p.Name
			out.Keys = append(out.Keys, k)
		}
		return out
	})
	return nil
}

// runTokens refreshes the keys and follows the fleet's revocations on g.
func (e *edge) runTokens(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return e.tokens.Run(ctx) })
	if e.fleetRevocations != nil {
		g.Go(func() error { return e.fleetRevocations.Run(ctx) })
	}
}

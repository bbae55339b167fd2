package main

import (
	"context"
	"fmt"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/poolset"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"golang.org/x/sync/errgroup"
)

// poolKeys feeds the pool of one name, whichever *balance.Pool serves it
// after reloads.
type poolKeys struct {
	e    *edge
	name string
}

func (p poolKeys) SetCookieKeys(keys [][]byte) error {
	p.e.mu.Lock()
	ent := p.e.pools[p.name]
	p.e.mu.Unlock()
	if ent == nil {
		return fmt.Errorf("pool %q: gone", p.name)
	}
	return ent.Bal.SetCookieKeys(keys)
}

// newCookieKeys makes the Consul KV key followers of cfg's cookie pools
// with a consul_key and loads each once, bounded by fleet.StartWait (with a key of its own until Consul answers).
func (e *edge) newCookieKeys(cfg *conf.Config) error {
	e.cookieKeys = map[string]*fleet.CookieKeys{}
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		if pc.Balance != conf.BalanceCookie || pc.Cookie.ConsulKey == "" {
			continue
		}
		ck, err := fleet.NewCookieKeys(e.dyn.client, fleet.CookieKeysOptions{
			Pool: pc.Name, Key: pc.Cookie.ConsulKey, RotateEvery: pc.Cookie.RotateEvery.Std(), Keep: pc.Cookie.Keep,
			Target: poolKeys{e, pc.Name}, Logger: e.log,
		})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), fleet.StartWait)
		if err := ck.Load(ctx); err != nil {
			e.log.Warn("cookie keys not loaded from consul yet: cookies signed until then are this edge's own", "pool", pc.Name, "err", err)
		}
		cancel()
		e.cookieKeys[pc.Name] = ck
	}
	return nil
}

// runCookieKeys follows every pool's cookie-key entry on g.
func (e *edge) runCookieKeys(ctx context.Context, g *errgroup.Group) {
	for _, ck := range e.cookieKeys {
		g.Go(func() error { return ck.Run(ctx) })
	}
}

// reapplyCookieKeys gives pools a reload rebuilt the keys of their Consul
// entry again, and says when a reload asks for an entry not followed.
func (e *edge) reapplyCookieKeys(cfg *conf.Config, pools map[string]*poolset.Pool) {
	for name, ck := range e.cookieKeys {
		if ent := pools[name]; ent != nil && !ent.Reused() {
			if err := ck.Reapply(ent.Bal); err != nil {
				e.log.Error("cookie keys from consul not applied to the reloaded pool", "pool", name, "err", err)
			}
		}
	}
	for i := range cfg.Pools {
		if pc := &cfg.Pools[i]; pc.Cookie.ConsulKey != "" && e.cookieKeys[pc.Name] == nil {
			e.log.Warn("cookie.consul_key of a pool new to this process takes effect on restart", "pool", pc.Name)
		}
	}
}

// cookieKeyStatus is /status's view of the followed entries.
func (e *edge) cookieKeyStatus() []fleet.CookieKeysStatus {
	var out []fleet.CookieKeysStatus
	for _, ck := range e.cookieKeys {
		out = append(out, ck.Status())
	}
	return out
}

var _ fleet.CookieKeyTarget = poolKeys{}
var _ fleet.CookieKeyTarget = (*balance.Pool)(nil)

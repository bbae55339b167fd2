package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/hashicorp/consul/api"
	"golang.org/x/sync/errgroup"
)

// Host is what a Member needs of the edge it runs in; the edge implements
// it (in cmd/edge) and owns nothing else of the fleet's load.
type Host interface {
	// Pools are the pools the edge serves now, with their limits of fleet
	// scope (none for a pool whose limits are its own). Called on the
	// Member's goroutines; every call may see a reload's new pools.
	Pools() []Pool
	// Self is the edge's own part of its record: version, PID, address,
	// readiness and connections. Member fills in the pools.
	Self() Record
}

// MemberOptions configure a Member. Client, Prefix, ID and Host are
// required; the rest default as LoadOptions do.
type MemberOptions struct {
	Client *api.Client
	Prefix string
	ID     string
	Host   Host
	// PublishEvery, SessionTTL and StaleAfter are the Load's.
	PublishEvery, SessionTTL, StaleAfter time.Duration
	Logger                               *slog.Logger
}

// Member is this edge's part in the fleet's load: its record, published
// and followed by a Load, and the shares of fleet-scope limits a Shares
// sets on the host's pools from every snapshot. Its goroutines are
// started and ended by Run.
type Member struct {
	host   Host
	load   *Load
	shares *Shares
}

// NewMember validates o and builds the member; it applies the shares a
// lone edge has (the fallback until Consul answers), so limits of fleet
// scope hold from the first connection.
func NewMember(o MemberOptions) (*Member, error) {
	if o.Host == nil {
		return nil, fmt.Errorf("fleet: member %q: host is required", o.ID)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Member{host: o.Host, shares: NewShares(o.Logger)}
	l, err := NewLoad(LoadOptions{
		Client: o.Client, Prefix: o.Prefix, ID: o.ID,
		Collect: m.collect, Known: m.known, Published: m.published,
		PublishEvery: o.PublishEvery, SessionTTL: o.SessionTTL, StaleAfter: o.StaleAfter,
		Logger: o.Logger,
	})
	if err != nil {
		return nil, err
	}
	m.load = l
	m.apply()
	return m, nil
}

// Run publishes this edge's record, follows the fleet's and applies the
// shares after every answer, until ctx ends.
func (m *Member) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.load.Run(ctx) })
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-m.load.Changed():
				m.apply()
			}
		}
	})
	return g.Wait()
}

// Status is the Load's status: this edge's place in the fleet.
func (m *Member) Status() LoadStatus { return m.load.Status() }

// Snapshot is the fleet as last read.
func (m *Member) Snapshot() *Snapshot { return m.load.Snapshot() }

// Limits are the shares of fleet-scope limits the last apply set.
func (m *Member) Limits() []PoolLimits { return m.shares.Limits() }

// apply sets every fleet-scope limit's share from the fleet as last read,
// or the fallback when that is stale.
func (m *Member) apply() {
	st, snap, pools := m.load.Status(), m.load.Snapshot(), m.host.Pools()
	m.shares.Apply(st, snap, pools)
	applySubjects(st, snap, pools)
}

// collect is this edge's record now.
func (m *Member) collect() Record {
	r := m.host.Self()
	pools := m.host.Pools()
	r.Pools = withSubjects(m.shares.Loads(balancePools(pools), time.Now()), pools)
	return r
}

// published raises the shares Consul now holds the claims of.
func (m *Member) published(r Record) {
	m.shares.Published(r, balancePools(m.host.Pools()))
}

// known accepts the pools this edge serves and their members: a record
// naming anything else is cut to what this edge has.
func (m *Member) known(pool, backend string) bool {
	for _, p := range m.host.Pools() {
		if p.Name != pool {
			continue
		}
		if backend == "" {
			return true
		}
		return slices.ContainsFunc(p.Pool.Snapshot().Backends, func(b *balance.Backend) bool { return b.ID() == backend })
	}
	return false
}

// balancePools are the balancer pools of ps.
func balancePools(ps []Pool) []*balance.Pool {
	out := make([]*balance.Pool, len(ps))
	for i, p := range ps {
		out[i] = p.Pool
	}
	return out
}

package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
)

// testHost is an edge with one pool of fleet scope, "app" (b1, b2, at
// most 10 connections per backend over the fleet).
type testHost struct {
	version string
	app     *balance.Pool
}

func (h testHost) Pools() []Pool {
	return []Pool{{Name: "app", Pool: h.app, MaxConnectionsPerBackend: 10}}
}

func (h testHost) Self() Record { return Record{Version: h.version, Ready: true} }

// startMember runs a Member of a host with version v until the test ends.
func startMember(t *testing.T, agent *consultest.Agent, id, v string) (*Member, testHost) {
	t.Helper()
	h := testHost{version: v, app: sharesPool(t, "app", 0, "b1", "b2")}
	m, err := NewMember(MemberOptions{
		Client: boundedClient(t, agent.Addr), Prefix: "edge", ID: id, Host: h,
		PublishEvery: 100 * time.Millisecond, StaleAfter: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("member %s: Run: %v", id, err)
		}
	})
	return m, h
}

// TestMemberSharesTheFleetLimit: a lone edge holds the whole fleet-scope
// limit from its construction; once a second edge publishes, each follows
// the other's record (the host's own part of it included) and their
// shares of a backend's limit add up to no more than the limit.
func TestMemberSharesTheFleetLimit(t *testing.T) {
	agent := consultest.Start(t)
	a, ha := startMember(t, agent, "a", "v-a")
	if n, shared := connLimit(t, ha.app, "b1"); !shared || n != 10 {
		t.Fatalf("lone edge: b1's limit %d (shared %v), want the whole 10 as a share", n, shared)
	}
	b, hb := startMember(t, agent, "b", "v-b")
	for _, m := range []*Member{a, b} {
		testkit.WaitFor(t, "both edges read", func() bool {
			st := m.Status()
			return !st.Stale && st.Edges == 2
		})
	}
	if r, ok := a.Snapshot().Edge("b"); !ok || r.Version != "v-b" || !r.Ready {
		t.Errorf("a's view of b: %+v, %v; want b's own record (version v-b, ready)", r, ok)
	}
	testkit.WaitFor(t, "shares within the limit", func() bool {
		na, _ := connLimit(t, ha.app, "b1")
		nb, _ := connLimit(t, hb.app, "b1")
		return na+nb <= 10 && na < 10 && nb < 10
	})
	if l := a.Limits(); len(l) != 1 || l[0].Pool != "app" || l[0].MaxConnectionsPerBackend != 10 {
		t.Errorf("a's limits %+v, want app's 10 per backend", l)
	}
}

package fleet

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// revTarget is an edge's token component as Revocations sees it.
type revTarget struct {
	mu sync.Mutex
	rs []auth.Revocation
}

func (r *revTarget) SetFleet(rs []auth.Revocation) {
	r.mu.Lock()
	r.rs = rs
	r.mu.Unlock()
}

func (r *revTarget) subjects() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, x := range r.rs {
		out[x.Subject] = true
	}
	return out
}

func newTestRevocations(t *testing.T, addr, dir string) (*Revocations, *revTarget, func()) {
	t.Helper()
	tg := &revTarget{}
	f, err := NewRevocations(RevocationsOptions{Client: boundedClient(t, addr), Prefix: "edge", Target: tg,
		StateDir: dir, WaitTime: time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Load(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	return f, tg, func() { cancel(); <-done }
}

// TestRevocationsFollowedByEveryEdge: a revocation put through one edge
// reaches another through Consul; a second put of the same revocation is
// one entry; an entry past its until is neither applied nor kept in
// Consul; an entry whose key does not match what it revokes (written by
// hand under another name) is refused; and an edge that starts while
// Consul is down applies the set its state directory saved.
func TestRevocationsFollowedByEveryEdge(t *testing.T) {
	agent := consultest.Start(t)
	dirB := t.TempDir()
	a, _, stopA := newTestRevocations(t, agent.Addr, t.TempDir())
	defer stopA()
	_, tb, stopB := newTestRevocations(t, agent.Addr, dirB)

	ctx := context.Background()
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	for range 2 {
		if err := a.Put(ctx, auth.Revocation{Subject: "alice", Until: until}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "edge B to see alice revoked", func() bool { return tb.subjects()["alice"] })
	if keys, _, err := agent.Client.KV().Keys("edge/revoked/", "", nil); err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v: want one entry for one revocation", keys, err)
	}

	// Past its until: ignored and deleted.
	old := auth.Revocation{Subject: "bob", Until: time.Now().Add(-time.Minute).Truncate(time.Second)}
	v, _ := json.Marshal(old)
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: RevocationKey("edge", old), Value: v}, nil); err != nil {
		t.Fatal(err)
	}
	// Under a key that is not its own: refused.
	forged := auth.Revocation{Subject: "carol", Until: until}
	v, _ = json.Marshal(forged)
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: "edge/revoked/0000", Value: v}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the expired entry to be deleted", func() bool {
		p, _, err := agent.Client.KV().Get(RevocationKey("edge", old), nil)
		return err == nil && p == nil
	})
	if s := tb.subjects(); s["bob"] || s["carol"] || !s["alice"] {
		t.Fatalf("edge B enforces %v, want alice alone", s)
	}

	// A restart while Consul is down keeps alice revoked.
	stopB()
	agent.Stop()
	_, tc, stopC := newTestRevocations(t, agent.Addr, dirB)
	defer stopC()
	if !tc.subjects()["alice"] {
		t.Fatalf("restarted edge without consul enforces %v, want alice from its state file", tc.subjects())
	}
}

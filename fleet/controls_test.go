package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

func newTestControls(t *testing.T, addr, dir string) (*Controls, *balance.Layer, func()) {
	t.Helper()
	l := balance.NewLayer()
	f, err := NewControls(ControlsOptions{Client: boundedClient(t, addr), Prefix: "edge", Edge: "e1",
		Layers: func(pool string) *balance.Layer {
			if pool != "chat" {
				t.Errorf("a control applied to pool %q", pool)
			}
			return l
		},
		StateDir: dir, WaitTime: time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Load(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	return f, l, func() { cancel(); <-done }
}

// TestControlsFollowedByEveryEdge: a canary and a pause put through one
// edge reach another's fleet layer through Consul; an entry out of bounds
// (written by hand) is refused and the last valid control stays; a
// deleted entry clears the layer; and an edge that starts while Consul is
// down applies the controls its state directory saved.
func TestControlsFollowedByEveryEdge(t *testing.T) {
	agent := consultest.Start(t)
	dirB := t.TempDir()
	a, _, stopA := newTestControls(t, agent.Addr, t.TempDir())
	defer stopA()
	_, lb, stopB := newTestControls(t, agent.Addr, dirB)

	ctx := context.Background()
	c := &balance.Canary{Version: "v2", Share: 0.1, Rate: 50}
	if err := a.Put(ctx, "chat", c, true); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "edge B to apply the canary", func() bool {
		got := lb.Canary()
		return got != nil && *got == *c && lb.Paused()
	})

	for _, bad := range []string{`{"v":1,"canary":{"version":"v2","share":7},"at":"2026-01-01T00:00:00Z"}`, `{"v":2}`, `{"v":1,"x":1}`} {
		if _, err := agent.Client.KV().Put(&api.KVPair{Key: ControlKey("edge", "chat"), Value: []byte(bad)}, nil); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, "the bad entry to be read", func() bool { return a.Status().Refused == 1 })
		if got := lb.Canary(); got == nil || *got != *c {
			t.Fatalf("after %s: canary %+v, want the last valid one", bad, got)
		}
		if err := a.Put(ctx, "chat", c, true); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, "the good entry back", func() bool { return a.Status().Refused == 0 })
	}

	// A restart while Consul is down keeps the canary.
	stopB()
	agent.Stop()
	_, lc, stopC := newTestControls(t, agent.Addr, dirB)
	defer stopC()
	if got := lc.Canary(); got == nil || *got != *c || !lc.Paused() {
		t.Fatalf("restarted edge without consul: canary %+v paused %v, want the saved ones", got, lc.Paused())
	}
}

// TestControlsDeleted: no canary and no pause deletes the entry and clears the
// layer on every edge.
func TestControlsDeleted(t *testing.T) {
	agent := consultest.Start(t)
	a, _, stopA := newTestControls(t, agent.Addr, "")
	defer stopA()
	_, lb, stopB := newTestControls(t, agent.Addr, "")
	defer stopB()
	ctx := context.Background()
	if err := a.Put(ctx, "chat", &balance.Canary{Version: "v2", Share: 1}, false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "edge B to apply the canary", func() bool { return lb.Canary() != nil })
	if err := a.Put(ctx, "chat", nil, false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "edge B to clear the canary", func() bool { return lb.Canary() == nil })
	if p, _, _ := agent.Client.KV().Get(ControlKey("edge", "chat"), nil); p != nil {
		t.Fatalf("entry kept: %s", p.Value)
	}
}

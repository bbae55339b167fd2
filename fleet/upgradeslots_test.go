package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// TestUpgradeSlotsOneAtATime, against a real agent: with a limit of one,
// a second edge waits while the first holds the slot (saying who holds
// it), gives up at its bound, takes the slot as soon as the first gives it
// back, and an edge with another limit is refused with the setting named.
func TestUpgradeSlotsOneAtATime(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	ctx := context.Background()
	slots := func(id string, limit int) *UpgradeSlots {
		return NewUpgradeSlots(boundedClient(t, agent.Addr), UpgradeSlotsOptions{Prefix: "edge/fleet/", Limit: limit, ID: id, PID: 4242, Round: 200 * time.Millisecond})
	}
	a, b := slots("edge-a", 1), slots("edge-b", 1)
	releaseA, err := a.Acquire(ctx, time.Minute, func(h string) { t.Errorf("edge-a waited for %s with the slots free", h) })
	if err != nil {
		t.Fatal(err)
	}
	var waits atomic.Int32
	_, err = b.Acquire(ctx, time.Second, func(h string) {
		waits.Add(1)
		if !strings.HasPrefix(h, "edge-a (pid 4242, since ") {
			t.Errorf("holders while edge-a holds the slot: %q", h)
		}
	})
	if !errors.Is(err, ErrNoSlot) || !strings.Contains(err.Error(), "within 1s: held by edge-a (pid 4242") {
		t.Errorf("edge-b at its bound: %v, want ErrNoSlot naming edge-a", err)
	}
	if waits.Load() < 2 {
		t.Errorf("edge-b said it waits %d times in 1s of 200ms rounds; want at the start and after each round", waits.Load())
	}

	waiting := make(chan struct{}, 16)
	got := make(chan error, 1)
	var releasedA atomic.Bool
	var releaseB func()
	go func() {
		var err error
		releaseB, err = b.Acquire(ctx, time.Minute, func(string) { waiting <- struct{}{} })
		if err == nil && !releasedA.Load() {
			err = errors.New("edge-b took the slot while edge-a held it")
		}
		got <- err
	}()
	<-waiting
	releasedA.Store(true)
	releaseA()
	releaseA() // twice is harmless
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	defer releaseB()

	_, err = slots("edge-c", 2).Acquire(ctx, time.Second, func(string) {})
	if err == nil || !strings.Contains(err.Error(), "upgrade.fleet_concurrency") {
		t.Errorf("an edge with another limit: %v, want a refusal naming the setting", err)
	}
}

// TestUpgradeSlotsFreedByADeadHolder: the slot of an edge whose session
// ends (it died, or Consul invalidated it) is free again.
func TestUpgradeSlotsFreedByADeadHolder(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	ctx := context.Background()
	a := NewUpgradeSlots(boundedClient(t, agent.Addr), UpgradeSlotsOptions{Prefix: "edge", Limit: 1, ID: "edge-a", Round: 200 * time.Millisecond})
	if _, err := a.Acquire(ctx, time.Minute, func(string) {}); err != nil {
		t.Fatal(err)
	}
	// What a's death does in time: its session goes.
	sessions, _, err := agent.Client.Session().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if s.Name == "edge upgrade edge-a" {
			if _, err := agent.Client.Session().Destroy(s.ID, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := NewUpgradeSlots(boundedClient(t, agent.Addr), UpgradeSlotsOptions{Prefix: "edge", Limit: 1, ID: "edge-b", Round: 200 * time.Millisecond})
	release, err := b.Acquire(ctx, time.Minute, func(string) {})
	if err != nil {
		t.Fatalf("after the holder's session ended: %v", err)
	}
	release()
}

// TestUpgradeSlotsLostSlotIsSaid: a slot whose session ends while it is
// held is logged at Warn and counted, and a slot given back is not. The
// session is destroyed here because that is exactly what Consul does to
// it when the edge cannot reach Consul for longer than its TTL (between
// one and two TTLs, 15 to 30 s, after the last renewal): the same loss,
// without an outage of that length in the test.
func TestUpgradeSlotsLostSlotIsSaid(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	ctx := context.Background()
	log := &testkit.Buffer{}
	lost := make(chan struct{}, 1)
	a := NewUpgradeSlots(boundedClient(t, agent.Addr), UpgradeSlotsOptions{Prefix: "edge", Limit: 1, ID: "edge-a", Round: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, nil)), OnLost: func() { lost <- struct{}{} }})
	release, err := a.Acquire(ctx, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	sessions, _, err := agent.Client.Session().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if s.Name == "edge upgrade edge-a" {
			if _, err := agent.Client.Session().Destroy(s.ID, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-lost:
	case <-time.After(time.Minute):
		t.Fatal("the loss of the slot was never said")
	}
	release()
	if n := a.Lost(); n != 1 {
		t.Errorf("Lost() = %d, want 1", n)
	}
	if out := log.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "fleet upgrade slot lost") {
		t.Errorf("log lacks the loss at Warn:\n%s", out)
	}

	b := NewUpgradeSlots(boundedClient(t, agent.Addr), UpgradeSlotsOptions{Prefix: "edge", Limit: 1, ID: "edge-b", Round: 200 * time.Millisecond,
		OnLost: func() { t.Error("a slot given back was counted as lost") }})
	release, err = b.Acquire(ctx, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	release() // waits for the slot's goroutines
	if n := b.Lost(); n != 0 {
		t.Errorf("Lost() after a release = %d, want 0", n)
	}
}

// TestUpgradeSlotsHostileHolder: whoever can write the prefix may name a
// holder anything; what an edge prints of it is bounded and printable,
// and a lock too large to read is said so, not read.
func TestUpgradeSlotsHostileHolder(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client
	ctx := context.Background()
	s := NewUpgradeSlots(boundedClient(t, agent.Addr), UpgradeSlotsOptions{Prefix: "edge", Limit: 1, ID: "edge-b"})
	sid, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	evil, _ := json.Marshal(slotHolder{ID: "\x1b[2J\x1b[31m" + strings.Repeat("x", 5000) + "\n", PID: 1})
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: "edge/upgrade/" + sid, Value: evil, Session: sid}, nil); err != nil || !ok {
		t.Fatalf("contender entry: %v %v", ok, err)
	}
	lock, _ := json.Marshal(map[string]any{"Limit": 1, "Holders": map[string]bool{sid: true}})
	if _, err := c.KV().Put(&api.KVPair{Key: "edge/upgrade/.lock", Value: lock, Flags: api.SemaphoreFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	n, who := s.holders(ctx)
	if n != 1 || len([]rune(who)) > maxSlotHolderText+40 || strings.ContainsFunc(who, func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Errorf("holders: %d, %q; want one, printable and bounded", n, who)
	}
	big := make([]byte, maxSlotLockBytes+1)
	if _, err := c.KV().Put(&api.KVPair{Key: "edge/upgrade/.lock", Value: big, Flags: api.SemaphoreFlagValue}, nil); err != nil {
		t.Fatal(err)
	}
	if _, who := s.holders(ctx); !strings.Contains(who, consul.ErrResponseTooLarge.Error()) {
		t.Errorf("holders from an oversized lock: %q", who)
	}

	// A prefix filled past the client's bound fails the wait, unread.
	bounded, err := consul.NewClient(consul.ClientOptions{Address: agent.Addr, MaxResponseBytes: MaxUpgradeSlotsResponse})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.KV().Put(&api.KVPair{Key: fmt.Sprintf("edge/upgrade/junk-%d", i), Value: make([]byte, 400<<10)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err = NewUpgradeSlots(bounded, UpgradeSlotsOptions{Prefix: "edge", Limit: 1, ID: "edge-c"}).Acquire(ctx, time.Minute, nil)
	// api.Semaphore keeps the cause's text, not the error.
	if err == nil || !strings.Contains(err.Error(), consul.ErrResponseTooLarge.Error()) {
		t.Errorf("a wait on a prefix past the bound: %v, want the client's bound", err)
	}
}

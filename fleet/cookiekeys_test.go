package fleet

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// keyedPool is a cookie pool whose keys come from a CookieKeys on the
// agent, run until the test ends.
type keyedPool struct {
	pool *balance.Pool
	keys *CookieKeys
}

func startKeyedPool(t *testing.T, agent *consultest.Agent, clk *clock, name string) keyedPool {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Name: "chat", Mode: balance.Cookie})
	if err != nil {
		t.Fatal(err)
	}
	var ms []balance.Member
	for _, id := range []string{"b1", "b2", "b3", "b4"} {
		ms = append(ms, balance.Member{ID: id, Addr: "127.0.0.1:1"})
	}
	if err := p.Update(ms); err != nil {
		t.Fatal(err)
	}
	k, err := NewCookieKeys(boundedClient(t, agent.Addr), CookieKeysOptions{
		Pool: name, Key: "edge/cookie-keys/chat", RotateEvery: time.Hour, Keep: 2, Target: p,
		WaitTime: 5 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Now: clk.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = k.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return keyedPool{pool: p, keys: k}
}

// honours reports how p treats cookie v: the backend it names, and
// whether p would issue a fresh one.
func honours(t *testing.T, p *balance.Pool, v string) (string, bool) {
	t.Helper()
	res, err := p.Pick(&balance.Request{Cookie: v})
	if err != nil {
		t.Fatal(err)
	}
	return res.Backend.ID(), res.SetCookie
}

// TestCookieKeysShareStickiness: three edges' pools take their cookie keys
// from one Consul KV entry. A cookie one issues names the same backend on
// the others and is not re-issued; after a rotation made by one edge the
// others follow at once (blocking query), honour the cookies issued before
// (re-issuing them under the new key) and the new ones alike.
func TestCookieKeysShareStickiness(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	clk := &clock{t: time.Now()}
	edges := []keyedPool{
		startKeyedPool(t, agent, clk, "A"),
		startKeyedPool(t, agent, clk, "B"),
		startKeyedPool(t, agent, clk, "C"),
	}
	a := edges[0].pool
	issued := map[string]string{} // cookie -> backend, from A
	for _, b := range a.Snapshot().Backends {
		issued[b.CookieValue()] = b.ID()
	}
	for i, e := range edges[1:] {
		for v, id := range issued {
			if got, reissue := honours(t, e.pool, v); got != id || reissue {
				t.Fatalf("edge %c: cookie of %s from A: backend %s, re-issue %v; want %s, false", 'B'+i, id, got, reissue, id)
			}
		}
	}

	// Rotation: due for everyone, made by B.
	clk.add(time.Hour)
	if err := edges[1].keys.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := edges[1].pool.Snapshot().ByID("b1").CookieValue()
	if _, ok := issued[fresh]; ok {
		t.Fatal("rotation did not change the signing key")
	}
	for i, e := range edges {
		// The snapshot, not the backend's value: a pool publishes the
		// backends' new values before the snapshot that looks them up.
		testkit.WaitFor(t, fmt.Sprintf("edge %c signing with the rotated key", 'A'+i), func() bool {
			res, err := e.pool.Pick(&balance.Request{Cookie: fresh})
			return err == nil && res.Backend.ID() == "b1" && !res.SetCookie
		})
	}
	for i, e := range edges {
		for v, id := range issued {
			if got, reissue := honours(t, e.pool, v); got != id || !reissue {
				t.Fatalf("edge %c after rotation: cookie of %s issued before: backend %s, re-issue %v; want %s, true", 'A'+i, id, got, reissue, id)
			}
		}
		for _, b := range edges[0].pool.Snapshot().Backends {
			if got, reissue := honours(t, e.pool, b.CookieValue()); got != b.ID() || reissue {
				t.Fatalf("edge %c: cookie of %s issued after rotation: backend %s, re-issue %v; want %s, false", 'A'+i, b.ID(), got, reissue, b.ID())
			}
		}
	}
	st := edges[2].keys.Status()
	if st.Keys != 3 || st.LastError != "" || st.NextDue.IsZero() {
		t.Fatalf("status after one rotation: %+v; want 3 keys (signing, staged, previous), no error, a due time", st)
	}
}

// TestCookieKeysHostileEntry: an entry someone overwrote with garbage, too
// many keys or short keys is refused; the keys in use stay and the entry is
// not overwritten.
func TestCookieKeysHostileEntry(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	clk := &clock{t: time.Now()}
	e := startKeyedPool(t, agent, clk, "A")
	before := e.pool.Snapshot().ByID("b1").CookieValue()
	for _, bad := range []string{
		"not base64 at all\n",
		base64.StdEncoding.EncodeToString([]byte("short")) + "\n",
		strings.Repeat(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123"))+"\n", MaxCookieKeys+1),
		strings.Repeat("A", 9000),
		strings.Repeat("A", 512<<10), // Consul's largest value
	} {
		putKV(t, agent, "edge/cookie-keys/chat", bad, uint64(clk.now().Unix()))
		err := e.keys.Load(context.Background())
		if err == nil {
			t.Fatalf("entry %.40q accepted", bad)
		}
		// An entry over the bound is refused by its answer's bound, before
		// any of it is decoded.
		if len(bad) > maxCookieEntryBytes && !errors.Is(err, consul.ErrResponseTooLarge) {
			t.Fatalf("entry of %d bytes: %v, want it refused unread", len(bad), err)
		}
		if got := e.pool.Snapshot().ByID("b1").CookieValue(); got != before {
			t.Fatalf("entry %.40q changed the signing key", bad)
		}
	}
}

func putKV(t *testing.T, agent *consultest.Agent, key, value string, flags uint64) {
	t.Helper()
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: key, Value: []byte(value), Flags: flags}, nil); err != nil {
		t.Fatal(err)
	}
}

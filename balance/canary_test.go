package balance_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// canaryMembers is four backends of version v1 and two of v2.
func canaryMembers() []balance.Member {
	ms := members(6)
	for i := range ms {
		ms[i].Version = "v1"
		if i >= 4 {
			ms[i].Version = "v2"
		}
	}
	return ms
}

// held picks and acquires n connections, and returns how many landed on
// version v.
func held(t *testing.T, p *balance.Pool, n int, v string) int {
	t.Helper()
	on := 0
	for range n {
		r := pick(t, p, balance.Request{})
		r.Backend.Acquire()
		if r.Backend.Version() == v {
			on++
		}
	}
	return on
}

// TestCanarySplitsConnections: the version holds its share of the pool's
// connections, whatever its number of backends; promotion sends every new
// connection to it, rollback none.
func TestCanarySplitsConnections(t *testing.T) {
	fleet := balance.NewLayer()
	p := newPool(t, balance.PoolOptions{Name: "chat", Fleet: fleet}, canaryMembers()...)
	if err := fleet.SetCanary(&balance.Canary{Version: "v2", Share: 0.1}); err != nil {
		t.Fatal(err)
	}
	if on := held(t, p, 10000, "v2"); math.Abs(float64(on)/10000-0.1) > 0.01 {
		t.Fatalf("v2 holds %d of 10000 connections at a 10 %% canary", on)
	}
	for _, b := range p.Snapshot().Backends {
		if b.Version() == "v2" && math.Abs(float64(b.Active())-500) > 50 {
			t.Fatalf("%s holds %d, want about half of v2's 1000", b.ID(), b.Active())
		}
	}
	must(t, fleet.SetCanary(&balance.Canary{Version: "v2", Share: 1}))
	if on := held(t, p, 1000, "v2"); on != 1000 {
		t.Fatalf("promoted: %d of 1000 new connections on v2", on)
	}
	must(t, fleet.SetCanary(&balance.Canary{Version: "v2", Share: 0}))
	if on := held(t, p, 1000, "v2"); on != 0 {
		t.Fatalf("rolled back: %d of 1000 new connections on v2", on)
	}
}

// TestCanaryYieldsToServing: a side with no usable backend leaves every
// connection to the other; the canary applies to a pool built later with
// the layer (a reload), and the local layer's canary is the one in force.
func TestCanaryYieldsToServing(t *testing.T) {
	fleet := balance.NewLayer()
	must(t, fleet.SetCanary(&balance.Canary{Version: "v2", Share: 1}))
	p := newPool(t, balance.PoolOptions{Name: "chat", Fleet: fleet}, canaryMembers()...)
	if c := p.Canary(); c == nil || c.Share != 1 {
		t.Fatalf("a pool built after the canary was set has %+v", c)
	}
	for _, id := range []string{"b04", "b05"} {
		if _, err := p.SetAdminState(id, balance.AdminDisabled); err != nil {
			t.Fatal(err)
		}
	}
	if on := held(t, p, 100, "v1"); on != 100 {
		t.Fatalf("v2 all disabled: %d of 100 on v1, want all", on)
	}
	must(t, p.Layer(balance.Local).SetCanary(&balance.Canary{Version: "v1", Share: 0}))
	if c := p.Canary(); c.Version != "v1" {
		t.Fatalf("the local canary is not in force: %+v", c)
	}
}

// TestCanaryBounds: what an operator or a registration may not set.
func TestCanaryBounds(t *testing.T) {
	l := balance.NewLayer()
	for _, c := range []balance.Canary{
		{Share: 0.5},
		{Version: "v2", Share: 1.5},
		{Version: "v2", Share: math.NaN()},
		{Version: "v2", Share: 0.5, Rate: -1},
		{Version: "v2", Share: 0.5, Rate: balance.MaxCanaryRate + 1},
		{Version: "v 2", Share: 0.5},
		{Version: strings.Repeat("v", balance.MaxVersionLen+1), Share: 0.5},
	} {
		if err := l.SetCanary(&c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	p, _ := balance.NewPool(balance.PoolOptions{})
	err := p.Update([]balance.Member{{Addr: "10.0.0.1:80", Version: "v\n1"}})
	if err == nil {
		t.Fatal("a member with a control character in its version was accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSheddingReplacesTheCookie: a client whose cookie names a backend
// being shed is placed by the pick and given a new cookie, so a moved
// client does not come straight back.
func TestSheddingReplacesTheCookie(t *testing.T) {
	clk := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{Mode: balance.Cookie, Cookie: balance.CookieOptions{Keys: [][]byte{keyA}}, Now: clk.Now}, members(2)...)
	b0 := byID(t, p, "b00")
	req := balance.Request{Cookie: b0.CookieValue()}
	if r := pick(t, p, req); r.Backend != b0 || r.SetCookie {
		t.Fatalf("before: %+v", r)
	}
	for range 10 { // over its share, as a shed backend is
		b0.Acquire()
	}
	b0.SetShedding(clk.Now().Add(2 * time.Second))
	for range 20 {
		if r := pick(t, p, req); r.Backend == b0 || !r.SetCookie {
			t.Fatalf("shedding: the cookie still leads to b00 (%+v)", r)
		}
	}
	clk.Advance(2 * time.Second)
	if r := pick(t, p, req); r.Backend != b0 {
		t.Fatalf("after the shedding: %+v", r)
	}
}

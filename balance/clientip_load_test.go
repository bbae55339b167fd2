package balance_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/edgelb/edge/balance"
)

// owner is where pure rendezvous hashing (no load bound) puts ip, skipping
// the backends with the IDs in skip: what every edge of a fleet computes
// alike, whatever connections it happens to carry.
func owner(t testing.TB, ref *balance.Pool, ip netip.Addr, skip ...string) string {
	var tried []*balance.Backend
	for _, id := range skip {
		tried = append(tried, byID(t, ref, id))
	}
	res, err := ref.Pick(&balance.Request{ClientIP: ip, Tried: tried})
	if err != nil {
		t.Fatalf("Pick(%v): %v", ip, err)
	}
	return res.Backend.ID()
}

// spillLimit is the most connections a backend of weight w may hold, once
// the pool carries total of them, before bounded load passes it over: its
// weighted share times factor, or its share plus minExcess, whichever is
// larger.
func spillLimit(total int64, w, wsum int, factor float64, minExcess int64) int64 {
	share := float64(total) * float64(w) / float64(wsum)
	return max(int64(math.Ceil(factor*share)), int64(math.Ceil(share))+minExcess)
}

// TestClientIPOneAddressKeepsItsBackend is a NATed office, or one browser
// with several tabs, on an otherwise idle pool: 20 connections from one
// address, 5 open at a time. Each must land on the address's backend; a
// bound taken from the pool's tiny mean would spill them over the others.
func TestClientIPOneAddressKeepsItsBackend(t *testing.T) {
	p := ipPool(t, 0, members(3))
	ref := ipPool(t, math.Inf(1), members(3))
	ip := netip.MustParseAddr("192.0.2.10")
	want := owner(t, ref, ip)
	var open []*balance.Backend
	for i := range 20 {
		if len(open) == 5 {
			open[0].Release()
			open = open[1:]
		}
		b := pick(t, p, balance.Request{ClientIP: ip}).Backend
		if b.ID() != want {
			t.Errorf("connection %d with %d open: got %s, want %s", i, len(open), b.ID(), want)
		}
		b.Acquire()
		open = append(open, b)
	}
}

// TestClientIPFleetAgreesUnderNormalLoad simulates a fleet of two edges
// behind an L4 balancer: every address opens 1 to 3 connections, each
// connection reaches one of the two edges at random, and each edge counts
// only its own. Under normal load (spread by the hash alone) both edges must
// send every connection of an address to the same backend, the one pure
// hashing names, from a handful of addresses up to 100,000; and every
// backend stays within its bound.
func TestClientIPFleetAgreesUnderNormalLoad(t *testing.T) {
	ms := members(5)
	ms[3].Weight = 2
	wsum := 6
	for _, n := range []int{10, 100, 1000, 100_000} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("addresses=%d/ipv6=%v", n, v6), func(t *testing.T) {
				t.Parallel()
				ref := ipPool(t, math.Inf(1), ms)
				edges := [2]*balance.Pool{ipPool(t, 0, ms), ipPool(t, 0, ms)}
				var conns []netip.Addr
				r := rand.New(rand.NewPCG(uint64(n), 7))
				for _, ip := range clientIPs(n, v6, uint64(n)) {
					for range 1 + r.IntN(3) {
						conns = append(conns, ip)
					}
				}
				r.Shuffle(len(conns), func(i, j int) { conns[i], conns[j] = conns[j], conns[i] })
				var total [2]int64
				for _, ip := range conns {
					e := r.IntN(2)
					b := pick(t, edges[e], balance.Request{ClientIP: ip}).Backend
					if want := owner(t, ref, ip); b.ID() != want {
						t.Fatalf("edge %d: %v went to %s with %d connections open, want %s (its hash)", e, ip, b.ID(), total[e], want)
					}
					b.Acquire()
					total[e]++
				}
				for e, p := range edges {
					for _, b := range p.Snapshot().Backends {
						if lim := spillLimit(total[e], b.Weight(), wsum, balance.DefaultBoundedLoad, balance.DefaultMinExcess); b.Active() > lim {
							t.Errorf("edge %d: %s holds %d of %d, over its bound %d", e, b.ID(), b.Active(), total[e], lim)
						}
					}
				}
			})
		}
	}
}

// TestClientIPOverloadedBackendSheds: one address (a hot NAT gateway) opens
// far more connections than its backend's share plus the floor. Its backend
// must stop at the bound and the rest spill; while it is full, new
// addresses hashed to it go to their second choice and no other address
// moves; once the hot connections close, new addresses land on their hash
// again.
func TestClientIPOverloadedBackendSheds(t *testing.T) {
	ms := members(3)
	p := ipPool(t, 0, ms)
	ref := ipPool(t, math.Inf(1), ms)
	var total int64
	for _, ip := range clientIPs(3000, false, 11) {
		pick(t, p, balance.Request{ClientIP: ip}).Backend.Acquire()
		total++
	}
	hot := netip.MustParseAddr("198.51.100.200")
	home := owner(t, ref, hot)
	var hotConns []*balance.Backend
	spilled := 0
	for range 3000 {
		b := pick(t, p, balance.Request{ClientIP: hot}).Backend
		b.Acquire()
		total++
		hotConns = append(hotConns, b)
		if b.ID() != home {
			spilled++
		}
		if lim := spillLimit(total, 1, 3, balance.DefaultBoundedLoad, balance.DefaultMinExcess); byID(t, p, home).Active() > lim {
			t.Fatalf("%s holds %d of %d connections, over its bound %d", home, byID(t, p, home).Active(), total, lim)
		}
	}
	if spilled == 0 {
		t.Fatalf("3000 connections from %v all stayed on %s; want the excess spilled", hot, home)
	}
	// Fill the hot address's backend until its next connection would spill:
	// the state new addresses then meet is a full backend.
	for range 100 {
		if place(t, p, hot) != home {
			break
		}
		b := pick(t, p, balance.Request{ClientIP: hot}).Backend
		b.Acquire()
		total++
		hotConns = append(hotConns, b)
	}
	if place(t, p, hot) == home {
		t.Fatalf("%s never filled: %d of %d connections", home, byID(t, p, home).Active(), total)
	}
	moved := 0
	for _, ip := range clientIPs(1000, false, 12) {
		got, want := place(t, p, ip), owner(t, ref, ip)
		if want != home {
			if got != want {
				t.Errorf("%v moved %s -> %s although %s is not overloaded", ip, want, got, want)
			}
			continue
		}
		moved++
		if second := owner(t, ref, ip, home); got != second {
			t.Errorf("%v (hashed to the full %s) went to %s, want its second choice %s", ip, home, got, second)
		}
	}
	if moved == 0 {
		t.Fatalf("no new address hashed to %s; the check proved nothing", home)
	}
	for _, b := range hotConns {
		b.Release()
	}
	for _, ip := range clientIPs(1000, false, 13) {
		if got, want := place(t, p, ip), owner(t, ref, ip); got != want {
			t.Errorf("after the hot address left: %v on %s, want %s", ip, got, want)
		}
	}
}

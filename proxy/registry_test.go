package proxy

import (
	"math/rand/v2"
	"testing"

	"github.com/edgelb/edge/balance"
)

// TestRegistryAddRemove checks the registry's list against a set kept
// aside through adds and removals in a random order, a connection
// removed twice and one never added: every registered connection is
// listed once, and only those.
func TestRegistryAddRemove(t *testing.T) {
	var g registry
	want := map[*wsConn]bool{}
	conns := make([]*wsConn, 200)
	for i := range conns {
		conns[i] = &wsConn{be: &balance.Backend{}}
	}
	check := func(when string) {
		t.Helper()
		seen := map[*wsConn]bool{}
		g.each(func(c *wsConn) {
			if seen[c] {
				t.Fatalf("%s: a connection is listed twice", when)
			}
			seen[c] = true
		})
		if len(seen) != len(want) || len(g.appendAll(nil)) != len(want) {
			t.Fatalf("%s: %d listed, %d registered", when, len(seen), len(want))
		}
		for _, c := range conns {
			if seen[c] != want[c] || g.has(c) != want[c] {
				t.Fatalf("%s: listed %v, has %v, registered %v", when, seen[c], g.has(c), want[c])
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range conns[:150] {
		if !g.add(c) {
			t.Fatal("add refused")
		}
		want[c] = true
	}
	check("added")
	for _, i := range rng.Perm(len(conns)) {
		c := conns[i]
		g.remove(c) // 50 of them never added
		g.remove(c)
		delete(want, c)
		if i%3 == 0 {
			g.add(c)
			want[c] = true
		}
		check("after a removal")
	}
}

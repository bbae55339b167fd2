package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/interop"
)

// wsPlacement is one connection the Node client made: from which source
// address, through which edge, and which backend answered.
type wsPlacement struct {
	Local   string `json:"local"`
	URL     string `json:"url"`
	Backend string `json:"backend"`
}

// runClientIPScript drives testdata/clientip.js (npm ws): connections from
// the given source addresses, count each, at most open held at a time,
// spread over urls.
func runClientIPScript(t *testing.T, open int, urls []string, counts map[string]int) []wsPlacement {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{fmt.Sprint(open), strings.Join(urls, ",")}
	for local, n := range counts {
		args = append(args, fmt.Sprintf("%s:%d", local, n))
	}
	cmd := interop.Node(t, ctx, "testdata/clientip.js", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node clientip.js: %v\n%s", err, stderr.String())
	}
	var got []wsPlacement
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node clientip.js printed %q: %v", out, err)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if len(got) != total {
		t.Fatalf("node made %d connections, want %d", len(got), total)
	}
	return got
}

// hashOwner is the backend pure rendezvous hashing names for addr among
// ids: what every edge with these members computes.
func hashOwner(t *testing.T, ids []string, addr string) string {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Mode: balance.ClientIP, BoundedLoad: math.Inf(1)})
	if err != nil {
		t.Fatal(err)
	}
	var ms []balance.Member
	for i, id := range ids {
		ms = append(ms, balance.Member{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", i+1)})
	}
	if err := p.Update(ms); err != nil {
		t.Fatal(err)
	}
	res, err := p.Pick(&balance.Request{ClientIP: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Backend.ID()
}

// TestClientIPOneAddressManyConnections: 20 WebSockets from one address,
// 5 open at a time, through an otherwise idle 3-backend client_ip pool, all
// land on one backend (HAProxy's balance source), the one the hash names.
func TestClientIPOneAddressManyConnections(t *testing.T) {
	bs := backends(t, "b1", "b2", "b3")
	s := newSetup(t, bs, "client_ip", "")
	startEdge(t, s.cfg)
	got := runClientIPScript(t, 5, []string{"ws://" + s.ws + "/chat"}, map[string]int{"127.0.0.1": 20})
	want := hashOwner(t, []string{"b1", "b2", "b3"}, "127.0.0.1")
	spread := map[string]int{}
	for _, p := range got {
		spread[p.Backend]++
	}
	if len(spread) != 1 || spread[want] != 20 {
		t.Errorf("20 connections from 127.0.0.1 landed on %v, want all 20 on %s", spread, want)
	}
}

// TestClientIPFleetKeepsEachAddress: two edges with the same backends, as
// behind an L4 balancer, and 49 source addresses (127.0.0.2 to 127.0.0.50)
// opening 4 WebSockets each, interleaved, alternating between the edges,
// 10 open at a time. Every address keeps one backend on both edges, the
// one the hash names.
func TestClientIPFleetKeepsEachAddress(t *testing.T) {
	bs := backends(t, "b1", "b2", "b3")
	s1 := newSetup(t, bs, "client_ip", "")
	s2 := newSetup(t, bs, "client_ip", "")
	startEdge(t, s1.cfg)
	startEdge(t, s2.cfg)
	counts := map[string]int{}
	for i := 2; i <= 50; i++ {
		counts[fmt.Sprintf("127.0.0.%d", i)] = 4
	}
	got := runClientIPScript(t, 10, []string{"ws://" + s1.ws + "/chat", "ws://" + s2.ws + "/chat"}, counts)
	byAddr := map[string]map[string]int{}
	for _, p := range got {
		if byAddr[p.Local] == nil {
			byAddr[p.Local] = map[string]int{}
		}
		byAddr[p.Local][p.Backend+" via "+p.URL]++
	}
	used := map[string]bool{}
	for local := range counts {
		want := hashOwner(t, []string{"b1", "b2", "b3"}, local)
		used[want] = true
		for where, n := range byAddr[local] {
			if !strings.HasPrefix(where, want+" ") {
				t.Errorf("%s: %d connection(s) on %s, want every one on %s (all: %v)", local, n, where, want, byAddr[local])
			}
		}
	}
	if len(used) < 2 {
		t.Errorf("49 addresses all hash to %v; the spread proves nothing", used)
	}
}

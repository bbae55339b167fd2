package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
)

// fleetEdges starts n edge processes in front of bs with one Consul; extra
// is appended to each one's pool.
func fleetEdges(t *testing.T, agent *consultest.Agent, n int, bs []*testbackend.Server, balance, extra string) []*setup {
	t.Helper()
	var out []*setup
	for range n {
		s := newSetup(t, bs, balance, extra+fmt.Sprintf("consul: {address: %q}\n", agent.Addr))
		startEdge(t, s.cfg)
		out = append(out, s)
	}
	return out
}

// dialCookie opens a WebSocket through s with the cookie (if any) and
// returns which backend answered and the cookie the 101 set, or nil.
func dialCookie(t *testing.T, s *setup, ck *http.Cookie) (string, *http.Cookie) {
	t.Helper()
	h := http.Header{}
	if ck != nil {
		h.Set("Cookie", ck.Name+"="+ck.Value)
	}
	c, resp, err := s.dialer().Dial("ws://"+s.ws+"/", h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var set *http.Cookie
	for _, x := range resp.Cookies() {
		set = x
	}
	return testkit.Ask(t, c, "whoami"), set
}

// TestFleetCookieKeysFromConsul: three edges take the pool's cookie keys
// from one Consul KV entry, with no secret file. A cookie edge A sets
// sends the client to the same backend through B and C, and neither
// re-issues it. When the entry is due, the edges rotate it themselves;
// afterwards every edge still honours the old cookie (re-issuing it), and
// a cookie A sets after the rotation is honoured by B and C as it is.
func TestFleetCookieKeysFromConsul(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "b3", "b4")
	const key = "edge/cookie-keys/app"
	edges := fleetEdges(t, agent, 3, bs, "cookie", fmt.Sprintf("    cookie: {consul_key: %q}\n", key))
	a := edges[0]

	first, ck := dialCookie(t, a, nil)
	if ck == nil {
		t.Fatal("edge A set no cookie")
	}
	for i, s := range edges[1:] {
		got, set := dialCookie(t, s, ck)
		if got != first || set != nil {
			t.Fatalf("edge %c with A's cookie: backend %s, set %v; want %s and no new cookie", 'B'+i, got, set, first)
		}
	}

	// Due: as if the last rotation were two periods ago. The edges' blocking
	// queries wake on the write; one of them rotates.
	kv := agent.Client.KV()
	pair, _, err := kv.Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("entry %s: %v, %v", key, pair, err)
	}
	before := string(pair.Value)
	pair.Flags = uint64(time.Now().Add(-48 * time.Hour).Unix())
	if _, err := kv.Put(pair, nil); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "an edge rotating the entry", func() bool {
		p, _, err := kv.Get(key, nil)
		return err == nil && p != nil && string(p.Value) != before
	})
	for i, s := range edges {
		testkit.WaitFor(t, fmt.Sprintf("edge %c re-issuing the cookie of before the rotation", 'A'+i), func() bool {
			got, set := dialCookie(t, s, ck)
			if got != first {
				t.Fatalf("edge %c after the rotation, old cookie: backend %s, want %s", 'A'+i, got, first)
			}
			return set != nil && set.Value != ck.Value
		})
	}
	_, fresh := dialCookie(t, a, ck)
	for i, s := range edges[1:] {
		got, set := dialCookie(t, s, fresh)
		if got != first || set != nil {
			t.Fatalf("edge %c with A's cookie after the rotation: backend %s, set %v; want %s and no new cookie", 'B'+i, got, set, first)
		}
	}
	p, _, _ := kv.Get(key, nil)
	if n := strings.Count(string(p.Value), "\n"); n != 3 {
		t.Fatalf("entry after one rotation holds %d keys, want 3 (signing, staged, previous)", n)
	}
	var st struct {
		CookieKeys []discovery.CookieKeysStatus `json:"cookie_keys"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, a.admin, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.CookieKeys) != 1 || st.CookieKeys[0].Keys != 3 || st.CookieKeys[0].Key != key {
		t.Fatalf("/status cookie_keys: %+v", st.CookieKeys)
	}
}

package admin

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// fakeSource is an edge as BuildStatus reads it.
type fakeSource struct {
	pools []*balance.Pool
	parts StatusParts
}

func (f fakeSource) Pools() []*balance.Pool   { return f.pools }
func (f fakeSource) StatusParts() StatusParts { return f.parts }

// TestBuildStatusPools: every member is shown with its health, weights
// and what the admin API set; a backend that left with live connections
// is "left", or "draining" while its clients are being sent 1012; one
// that left with none is gone.
func TestBuildStatusPools(t *testing.T) {
	p, err := balance.NewPool(balance.PoolOptions{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1", Weight: 3}, {ID: "b2", Addr: "127.0.0.1:2"}, {ID: "b3", Addr: "127.0.0.1:3"}, {ID: "b4", Addr: "127.0.0.1:4"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetAdminState("b1", balance.AdminDrain); err != nil {
		t.Fatal(err)
	}
	var b2, b3 *balance.Backend
	for _, b := range p.Snapshot().Backends {
		switch b.ID() {
		case "b2":
			b2 = b
		case "b3":
			b3 = b
		}
	}
	b2.Acquire()
	b3.Acquire()
	defer b2.Release()
	defer b3.Release()
	b3.SetDraining(time.Now().Add(time.Minute))
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1", Weight: 3}}); err != nil {
		t.Fatal(err)
	}
	doc := BuildStatus(fakeSource{pools: []*balance.Pool{p}})
	if len(doc.Pools) != 1 || doc.Pools[0].Name != "app" {
		t.Fatalf("pools: %+v", doc.Pools)
	}
	got := map[string]map[string]any{}
	for _, b := range doc.Pools[0].Backends {
		got[b["id"].(string)] = b
	}
	if len(got) != 3 || got["b4"] != nil {
		t.Errorf("backends %v: want b1, b2 and b3 (b4 left with no connection)", got)
	}
	if b := got["b1"]; b["state"] != "member" || b["admin_state"] != "drain" || b["declared_weight"] != 3 || b["weight_overridden"] != false || b["address"] != "127.0.0.1:1" {
		t.Errorf("b1: %v, want a member in admin state drain with declared weight 3", b)
	}
	if b := got["b2"]; b["state"] != "left" || b["active"] != int64(1) || b["available"] != false {
		t.Errorf("b2: %v, want left with 1 active", b)
	}
	if b := got["b3"]; b["state"] != "draining" {
		t.Errorf("b3: %v, want draining", b)
	}
}

// TestBuildStatusLeavesOutAbsentParts: parts a source does not have are
// not in the document, and listeners and routes are lists even when empty.
func TestBuildStatusLeavesOutAbsentParts(t *testing.T) {
	raw, err := json.Marshal(BuildStatus(fakeSource{parts: StatusParts{Version: "v1", PID: 7, TLS: map[string]any{}}}))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tls", "discovery", "cookie_keys", "fleet_actions", "fleet", "fleet_totals", "upgrade"} {
		if _, ok := doc[k]; ok {
			t.Errorf("%s is in %s; want it left out", k, raw)
		}
	}
	for _, k := range []string{"listeners", "routes"} {
		if l, ok := doc[k].([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %v in %s; want []", k, doc[k], raw)
		}
	}
	if doc["version"] != "v1" || doc["pid"] != float64(7) {
		t.Errorf("%s: want version v1, pid 7", raw)
	}
}

package admin

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStatusPageShowsTheFleet: the page renders the fleet's edges, its
// totals per pool and backend, and the actions of fleet scope, escaping
// names a writer of the fleet prefix chose.
func TestStatusPageShowsTheFleet(t *testing.T) {
	now := time.Now().UTC()
	doc := map[string]any{
		"version": "1.0",
		"fleet": map[string]any{"id": "edge-a", "prefix": "edge/fleet", "edges": 2, "last_read": now, "stale": false,
			"snapshot": map[string]any{"self": "edge-a", "edges": []any{
				map[string]any{"id": "edge-a", "address": "10.0.0.1:9901", "version": "1.0", "pid": 41, "ready": true, "connections": 7, "published": now},
				map[string]any{"id": "<b>edge-b</b>", "address": "10.0.0.2:9901", "version": "1.0", "pid": 42, "ready": false, "connections": 5, "published": now},
			}}},
		"fleet_totals": []any{map[string]any{"pool": "app", "rate": 2.5, "active": 12, "edges": 2,
			"backends": []any{map[string]any{"id": "b1", "active": 9}, map[string]any{"id": "b2", "active": 3}}}},
		"fleet_actions": map[string]any{"prefix": "edge/fleet", "refused": 1, "errors": []any{"fleet action edge/fleet/admin/app/x: version 9, want 1"},
			"actions": []any{map[string]any{"pool": "app", "backend": "b1", "state": "drain", "by": "edge-b", "at": now, "applied": true}}},
	}
	p := newStatusPage(func() any { return doc })
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	page := rec.Body.String()
	for _, want := range []string{
		`<tr class="fleet-edge" data-edge="edge-a"><td class="id">edge-a</td><td>10.0.0.1:9901</td><td>1.0</td><td class="n">41</td>`,
		`<span class="bad">not ready</span>`, `&lt;b&gt;edge-b&lt;/b&gt;`,
		`<td>app</td><td>all (2 edges)</td><td class="n">12</td><td class="n">2.5</td>`,
		`data-pool="app" data-backend="b1"><td>app</td><td>b1</td><td class="n">9</td>`,
		`<td>app</td><td>b1</td><td>drain</td><td class="n">declared</td><td>edge-b</td>`,
		`1 entries under edge/fleet/admin/ refused: fleet action edge/fleet/admin/app/x: version 9, want 1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %s", want)
		}
	}
	if strings.Contains(page, "<b>edge-b</b>") {
		t.Error("an edge id from the prefix reached the page unescaped")
	}
}

package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// fakeFleet records the changes of fleet scope it is given.
type fakeFleet struct {
	changes []string
	err     error
}

func (f *fakeFleet) Act(_ context.Context, pool, backend string, c Change) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	s := pool + "/" + backend
	if c.State != nil {
		s += " " + c.State.String()
	}
	if c.Weight != nil {
		s += " weight " + strings.Repeat("|", *c.Weight)
	}
	if c.Window != 0 {
		s += " " + c.Window.String()
	}
	f.changes = append(f.changes, s)
	return 4, nil
}

// post sends a write to the API of a and returns the status and body.
func post(t *testing.T, a *api, path, body string) (int, map[string]any) {
	t.Helper()
	mux := http.NewServeMux()
	a.register(mux)
	req := httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// TestWritesOfFleetScope: ?scope=fleet (or the configured default) hands
// drain, disable, enable and weight to the fleet's store and leaves the
// pool to it; local scope acts on the pool alone; an unknown scope, fleet
// scope without a store, and a store that fails answer an error and change
// nothing.
func TestWritesOfFleetScope(t *testing.T) {
	const b1 = "/api/v1/pools/app/backends/b1/"
	a, p := testAPI(t, Settings{Enabled: true, Write: true, Token: testToken, DrainWindow: 7 * time.Second})
	if code, out := post(t, a, b1+"drain?scope=fleet", ""); code != http.StatusConflict || !strings.Contains(out["error"].(string), "consul.fleet.prefix") {
		t.Errorf("fleet scope without a store: %d %v, want 409 naming consul.fleet.prefix", code, out)
	}
	f := &fakeFleet{}
	a.fleet = f
	for _, w := range []struct{ path, body, want string }{
		{b1 + "drain?scope=fleet", "", "app/b1 drain 7s"},
		{b1 + "drain?scope=fleet", `{"window": "30s"}`, "app/b1 drain 30s"},
		{b1 + "disable?scope=fleet", "", "app/b1 disabled"},
		{b1 + "enable?scope=fleet", "", "app/b1 ready"},
		{b1 + "weight?scope=fleet", `{"weight": 3}`, "app/b1 weight |||"},
	} {
		code, out := post(t, a, w.path, w.body)
		if code != http.StatusOK || out["scope"] != "fleet" {
			t.Fatalf("%s: %d %v", w.path, code, out)
		}
		if got := f.changes[len(f.changes)-1]; got != w.want {
			t.Errorf("%s %s: the store got %q, want %q", w.path, w.body, got, w.want)
		}
	}
	if _, out := post(t, a, b1+"drain?scope=fleet", ""); out["closing"] != 4.0 {
		t.Errorf("fleet drain answer %v: want the store's closing count", out)
	}
	if b := p.Snapshot().ByID("b1"); b.AdminState() != balance.AdminReady || b.WeightOverridden() {
		t.Errorf("fleet scope changed the pool itself: %v %v; the store applies it", b.AdminState(), b.Weight())
	}
}

// TestWritesOfScopeDefaultAndErrors: the configured default scope applies
// to requests that name none, ?scope=local overrides it, and an unknown
// scope, an unknown backend and a failing store change nothing.
func TestWritesOfScopeDefaultAndErrors(t *testing.T) {
	const b1 = "/api/v1/pools/app/backends/b1/"
	a, p := testAPI(t, Settings{Enabled: true, Write: true, Token: testToken})
	f := &fakeFleet{}
	a.fleet = f
	n := len(f.changes)
	if code, out := post(t, a, b1+"disable", ""); code != http.StatusOK || out["scope"] != "local" || p.Snapshot().ByID("b1").AdminState() != balance.AdminDisabled {
		t.Errorf("local disable: %d %v", code, out)
	}
	a.settings.Store(&Settings{Enabled: true, Write: true, Token: testToken, Scope: ScopeFleet})
	if code, out := post(t, a, b1+"enable", ""); code != http.StatusOK || out["scope"] != "fleet" || len(f.changes) != n+1 {
		t.Errorf("default scope fleet: %d %v, changes %v", code, out, f.changes)
	}
	if code, _ := post(t, a, b1+"enable?scope=local", ""); code != http.StatusOK || p.Snapshot().ByID("b1").AdminState() != balance.AdminReady {
		t.Errorf("?scope=local under a fleet default: %d", code)
	}
	if code, _ := post(t, a, b1+"disable?scope=world", ""); code != http.StatusBadRequest {
		t.Errorf("unknown scope: %d, want 400", code)
	}
	if code, _ := post(t, a, "/api/v1/pools/app/backends/b9/disable?scope=fleet", ""); code != http.StatusNotFound {
		t.Errorf("fleet scope on an unknown backend: %d, want 404", code)
	}
	f.err = errors.New("consul: connection refused")
	if code, out := post(t, a, b1+"disable", ""); code != http.StatusServiceUnavailable || !strings.Contains(out["error"].(string), "connection refused") {
		t.Errorf("store failing: %d %v, want 503 with the reason", code, out)
	}
	if b := p.Snapshot().ByID("b1"); b.AdminState() != balance.AdminReady {
		t.Errorf("a failed fleet write changed the pool: %v", b.AdminState())
	}
}

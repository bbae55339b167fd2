package rebalance

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
)

// store stands for fleet.Controls, which is tested against a real Consul
// in the fleet package: here only what the API hands it matters.
type store struct {
	pool   string
	canary *balance.Canary
	paused bool
}

func (s *store) Put(_ context.Context, pool string, c *balance.Canary, paused bool) error {
	s.pool, s.canary, s.paused = pool, c, paused
	return nil
}

func newAPI(t *testing.T, mode balance.Mode, st Store) (*API, *balance.Pool) {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Name: "app", Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	a := &API{Pools: func(name string) *balance.Pool {
		if name == "app" {
			return p
		}
		return nil
	}, Store: st, Runner: New(&host{}, nil)}
	return a, p
}

// call runs the endpoint of method and pattern on pool, with the query,
// and returns the answer and its status.
func call(t *testing.T, a *API, method, pattern, pool, query, body string) (any, int) {
	t.Helper()
	for _, ep := range a.Endpoints() {
		if ep.Method != method || ep.Path != pattern {
			continue
		}
		r := httptest.NewRequest(method, strings.Replace(pattern, "{pool}", pool, 1)+query, strings.NewReader(body))
		r.SetPathValue("pool", pool)
		v, err := ep.Handle(r)
		if err != nil {
			return err.Error(), admin.StatusOf(err)
		}
		return v, http.StatusOK
	}
	t.Fatalf("no endpoint %s %s", method, pattern)
	return nil, 0
}

const (
	canaryPath = "/api/v1/pools/{pool}/canary"
	pausePath  = "/api/v1/pools/{pool}/rebalance/pause"
	resumePath = "/api/v1/pools/{pool}/rebalance/resume"
)

// TestAPILocalScope: a canary and a pause of local scope land in the
// pool's local layer; a clear removes the canary and keeps the pause.
func TestAPILocalScope(t *testing.T) {
	a, p := newAPI(t, balance.LeastConn, nil)
	if _, code := call(t, a, "POST", canaryPath, "app", "", `{"version":"v2","share":0.25,"rate":5}`); code != 200 {
		t.Fatalf("set: %d", code)
	}
	if c := p.Canary(); c == nil || *c != (balance.Canary{Version: "v2", Share: 0.25, Rate: 5}) {
		t.Fatalf("in force: %+v", c)
	}
	if _, code := call(t, a, "POST", pausePath, "app", "", ""); code != 200 || !p.MovesPaused() {
		t.Fatalf("pause: %d, paused %v", code, p.MovesPaused())
	}
	if _, code := call(t, a, "POST", canaryPath+"/clear", "app", "", ""); code != 200 || p.Canary() != nil || !p.MovesPaused() {
		t.Fatalf("clear: %d, canary %+v, paused %v", code, p.Canary(), p.MovesPaused())
	}
	if _, code := call(t, a, "POST", resumePath, "app", "?scope=local", ""); code != 200 || p.MovesPaused() {
		t.Fatalf("resume: %d, paused %v", code, p.MovesPaused())
	}
	v, _ := call(t, a, "GET", canaryPath, "app", "", "")
	if d := v.(canaryDoc); d.Pool != "app" || d.InForce != nil || d.LocalPaused {
		t.Fatalf("GET: %+v", d)
	}
}

// TestAPIRefuses: what an operator may not ask, with its status.
func TestAPIRefuses(t *testing.T) {
	a, _ := newAPI(t, balance.LeastConn, nil)
	for _, c := range []struct {
		path, pool, query, body string
		want                    int
	}{
		{canaryPath, "app", "", `{"version":"v2","share":2}`, 400},
		{canaryPath, "app", "", `{"version":"","share":0.5}`, 400},
		{canaryPath, "app", "", `{"version":"v2","share":0.5,"extra":1}`, 400},
		{canaryPath, "app", "?scope=fleet", `{"version":"v2","share":0.5}`, 409},
		{canaryPath, "app", "?scope=nowhere", `{"version":"v2","share":0.5}`, 400},
		{canaryPath, "other", "", `{"version":"v2","share":0.5}`, 404},
	} {
		if v, code := call(t, a, "POST", c.path, c.pool, c.query, c.body); code != c.want {
			t.Errorf("%s%s %s: %d %v, want %d", c.pool, c.query, c.body, code, v, c.want)
		}
	}
	h, hp := newAPI(t, balance.ClientIP, &store{})
	if v, code := call(t, h, "POST", canaryPath, "app", "", `{"version":"v2","share":0.5}`); code != 409 {
		t.Errorf("client_ip pool: %d %v, want 409", code, v)
	}
	// A canary that reached the fleet layer another way (Consul KV) does
	// not stop an operator from pausing the pool.
	_ = hp.Layer(balance.Fleet).SetCanary(&balance.Canary{Version: "v2", Share: 0.5})
	if v, code := call(t, h, "POST", pausePath, "app", "", ""); code != 200 {
		t.Errorf("pause of a client_ip pool holding a canary: %d %v, want 200", code, v)
	}
}

// TestAPIFleetScope: with a store, the default scope is the fleet's, and
// a pause keeps the canary stored with it.
func TestAPIFleetScope(t *testing.T) {
	st := &store{}
	a, p := newAPI(t, balance.LeastConn, st)
	if _, code := call(t, a, "POST", canaryPath, "app", "", `{"version":"v2","share":1,"rate":100}`); code != 200 {
		t.Fatalf("set: %d", code)
	}
	if st.pool != "app" || st.canary == nil || st.canary.Share != 1 || st.paused {
		t.Fatalf("stored %+v", st)
	}
	if p.Layer(balance.Local).Canary() != nil {
		t.Fatal("a fleet-scope canary set the local layer")
	}
	// The store applies to the fleet layer (fleet.Controls does); here by hand.
	_ = p.Layer(balance.Fleet).SetCanary(st.canary)
	if _, code := call(t, a, "POST", pausePath, "app", "", ""); code != 200 || !st.paused || st.canary == nil {
		t.Fatalf("pause: %d, stored %+v", code, st)
	}
}

package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// noConns is the proxy side of the API for tests without connections.
type noConns struct{}

func (noConns) DrainConns(*balance.Backend, time.Duration) int { return 0 }
func (noConns) Connections(*balance.Backend) []Conn            { return nil }

func testAPI(t testing.TB, s Settings) (*api, *balance.Pool) {
	t.Helper()
	p, err := balance.NewPool(balance.PoolOptions{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	a := newAPI(func() []*balance.Pool { return []*balance.Pool{p} }, noConns{}, nil, nil)
	a.settings.Store(&s)
	return a, p
}

// TestAdminAPIRefusesWritesWithoutToken: with no token configured the API
// serves reads and refuses every write, whatever the Host says.
func TestAdminAPIRefusesWritesWithoutToken(t *testing.T) {
	a, p := testAPI(t, Settings{Enabled: true, Write: true})
	mux := http.NewServeMux()
	a.register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/pools/app/backends/b1/disable", nil)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "token_file") {
		t.Errorf("write without token: got %d %s, want 403 naming token_file", resp.StatusCode, body)
	}
	if b := p.Snapshot().ByID("b1"); b.AdminState() != balance.AdminReady {
		t.Errorf("the refused write changed the state to %v", b.AdminState())
	}
	resp, err = http.Get(srv.URL + "/api/v1/pools")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("read without token: got %d, want 200", resp.StatusCode)
	}
}

// FuzzAdminAPIWriteBody: any body to drain and weight answers a client
// error or success, never a server error, and a weight that was accepted
// is within range.
func FuzzAdminAPIWriteBody(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `{"weight": 3}`, `{"weight": 0}`, `{"weight": -1}`, `{"weight": 1e9}`, `{"weight": 2.5}`,
		`{"window": "10s"}`, `{"window": "-1s"}`, `{"window": 5}`, `{"weight": 1}{"weight": 2}`, `[`, `null`,
		`{"weight": null}`, `{"unknown": 1}`,
	} {
		f.Add("weight", seed)
		f.Add("drain", seed)
	}
	f.Fuzz(func(t *testing.T, op, body string) {
		if op != "weight" && op != "drain" {
			op = "weight"
		}
		a, p := testAPI(t, Settings{Enabled: true, Write: true, Token: testToken})
		mux := http.NewServeMux()
		a.register(mux)
		req := httptest.NewRequest("POST", "http://127.0.0.1/api/v1/pools/app/backends/b1/"+op, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", op, body, rec.Code, rec.Body)
		}
		w := p.Snapshot().ByID("b1").Weight()
		if w < 1 || w > balance.MaxWeight {
			t.Fatalf("%s %q: weight %d out of range", op, body, w)
		}
	})
}

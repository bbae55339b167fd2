package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestEjectionCapVisible: four backends that all refuse connections, cap
// 50%: two are ejected and two stay in; /status, /metrics and the log show
// the cap, the ejections and the refusals.
func TestEjectionCapVisible(t *testing.T) {
	bs := backends(t, "b1", "b2", "b3", "b4")
	for _, b := range bs {
		b.Close() // connect refused from now on
	}
	s := newSetup(t, bs, "least_conn", "    retries: 0\n    passive_ejection: {failures: 1, max_ejection_percent: 50}\n")
	p := startEdge(t, s.cfg)
	for range 6 {
		_, resp, err := s.dialer().Dial("ws://"+s.ws+"/", nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("dial: got %v %v, want 502", resp, err)
		}
	}
	resp, err := http.Get("http://" + s.admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Pools []struct {
			Name               string `json:"name"`
			MaxEjectionPercent int    `json:"max_ejection_percent"`
			MaxEjected         int    `json:"max_ejected"`
			Ejected            int    `json:"ejected"`
			Backends           []struct {
				Ejected          bool `json:"ejected"`
				Available        bool `json:"available"`
				EjectionsRefused int  `json:"ejections_refused"`
			} `json:"backends"`
		} `json:"pools"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Pools) != 1 {
		t.Fatalf("status: %v %+v", err, st)
	}
	ps := st.Pools[0]
	if ps.MaxEjectionPercent != 50 || ps.MaxEjected != 2 || ps.Ejected != 2 {
		t.Fatalf("status of the cap: %+v, want 50%%, max 2, 2 ejected", ps)
	}
	var available, refused int
	for _, b := range ps.Backends {
		if b.Available {
			available++
		}
		refused += b.EjectionsRefused
	}
	if available != 2 || refused == 0 {
		t.Fatalf("status: %d available, %d refusals; want 2 and some", available, refused)
	}

	resp, err = http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`edge_pool_ejected_backends{pool="app"} 2`,
		`edge_pool_max_ejected_backends{pool="app"} 2`,
		`edge_backend_ejections_total{address="` + bs[0].Addr() + `",backend="b1",pool="app"}`,
		`edge_backend_ejections_refused_total{`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics: no %q", want)
		}
	}
	p.waitLog(t, `"msg":"backend failing but not ejected`)
	if n := strings.Count(p.logs(), `"msg":"backend ejected"`); n != 2 {
		t.Errorf("log: %d ejection lines, want 2", n)
	}
	for _, line := range strings.Split(p.logs(), "\n") {
		if strings.Contains(line, `"msg":"backend ejected"`) &&
			(!strings.Contains(line, `"reason":"connect_refused"`) || !strings.Contains(line, `"until":`) || !strings.Contains(line, `"pool":"app"`)) {
			t.Errorf("ejection line without pool, reason or until: %s", line)
		}
	}
}

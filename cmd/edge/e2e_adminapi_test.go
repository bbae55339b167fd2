package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// apiCall sends one admin API request and returns the status and the JSON
// answer. hdr "Content-Type" defaults to application/json for a body, and
// a write carries the token edge generated unless hdr sets Authorization
// ("" for none).
func (s *setup) apiCall(t *testing.T, method, path, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
		if _, ok := hdr["Authorization"]; !ok {
			req.Header.Set("Authorization", "Bearer "+s.token(t))
		}
	}
	for k, v := range hdr {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, path, resp.StatusCode, trim(raw))
	}
	return resp.StatusCode, doc
}

// mustAPI is apiCall that wants 200.
func (s *setup) mustAPI(t *testing.T, method, path, body string) map[string]any {
	t.Helper()
	code, doc := s.apiCall(t, method, path, body, nil)
	if code != http.StatusOK {
		t.Fatalf("%s %s %s: got %d %v, want 200", method, path, body, code, doc)
	}
	return doc
}

// statusBackend returns the backend's entry in /status.
func (s *setup) statusBackend(t *testing.T, pool, id string) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Pools []struct {
			Name     string           `json:"name"`
			Backends []map[string]any `json:"backends"`
		} `json:"pools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Pools {
		for _, b := range p.Backends {
			if p.Name == pool && b["id"] == id {
				return b
			}
		}
	}
	t.Fatalf("/status has no backend %s/%s", pool, id)
	return nil
}

// metricsText returns /metrics.
func (s *setup) metricsText(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// dialOn opens n WebSockets and groups them by the backend that answered.
func (s *setup) dialOn(t *testing.T, n int) map[string][]*websocket.Conn {
	t.Helper()
	out := map[string][]*websocket.Conn{}
	for range n {
		c, _, err := s.dialer().Dial("ws://"+s.ws+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		id := testkit.Ask(t, c, "whoami")
		out[id] = append(out[id], c)
	}
	return out
}

func counts(m map[string][]*websocket.Conn) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// TestAdminAPIDrain: drain sends close 1012 to the live WebSockets of that
// backend only (seen by the npm ws client and by the Go client), new
// connections go elsewhere, /status, the connection list and metrics say
// so, and enable brings the backend back.
func TestAdminAPIDrain(t *testing.T) {
	bs := backends(t, "b1", "b2")
	s := newSetup(t, bs, "least_conn", "")
	startEdge(t, s.cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := interop.Node(t, ctx, "testdata/wsclose.js", "ws://"+s.ws+"/", "4")
	out, err := node.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	node.Stderr = os.Stderr
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = node.Process.Kill(); _ = node.Wait() }()
	lines := bufio.NewScanner(out)
	nodeOn := map[string]string{} // connection index -> backend
	for len(nodeOn) < 4 && lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 3 && f[0] == "open" {
			nodeOn[f[1]] = f[2]
		}
	}
	goConns := s.dialOn(t, 4)
	onB1 := 0
	for _, b := range nodeOn {
		if b == "b1" {
			onB1++
		}
	}
	if onB1 == 0 || len(goConns["b1"]) == 0 || len(goConns["b2"]) == 0 {
		t.Fatalf("least_conn placed node %v, go %v; want both backends used", nodeOn, counts(goConns))
	}

	list := s.mustAPI(t, "GET", "/api/v1/pools/app/backends/b1/connections", "")
	if got, want := len(list["connections"].([]any)), onB1+len(goConns["b1"]); got != want {
		t.Fatalf("connections on b1: got %d, want %d: %v", got, want, list)
	}
	first := list["connections"].([]any)[0].(map[string]any)
	if first["client"] != "127.0.0.1" || first["listener"] != "ws" || first["path"] != "/" {
		t.Errorf("connection entry: got %v, want client 127.0.0.1 on listener ws, path /", first)
	}

	doc := s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b1/drain", `{"window": "500ms"}`)
	if got, want := doc["closing"], float64(onB1+len(goConns["b1"])); got != want || doc["admin_state"] != "drain" {
		t.Fatalf("drain answer: got %v, want closing %v and admin_state drain", doc, want)
	}
	for _, c := range goConns["b1"] {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1012) {
			t.Errorf("go client on b1: got %v, want close 1012", err)
		}
	}
	closes := map[string]string{}
	for len(closes) < onB1 && lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 3 && f[0] == "close" {
			closes[f[1]] = f[2]
		}
	}
	for i, b := range nodeOn {
		if b == "b1" && closes[i] != "1012" {
			t.Errorf("npm ws connection %s on b1: closed with %q, want 1012 (closes %v)", i, closes[i], closes)
		}
		if b == "b2" && closes[i] != "" {
			t.Errorf("npm ws connection %s on b2 was closed (%s) by draining b1", i, closes[i])
		}
	}
	for _, c := range goConns["b2"] {
		if got := testkit.Ask(t, c, "still"); got != "still" {
			t.Errorf("b2 connection after draining b1: %q", got)
		}
	}
	if fresh := counts(s.dialOn(t, 6)); fresh["b1"] != 0 {
		t.Errorf("new connections after drain: %v, want none on b1", fresh)
	}
	if st := s.statusBackend(t, "app", "b1"); st["admin_state"] != "drain" || st["available"] != false {
		t.Errorf("/status b1: %v, want admin_state drain, unavailable", st)
	}
	m := s.metricsText(t)
	for _, want := range []string{
		`edge_backend_admin_state{backend="b1",pool="app",state="drain"} 1`,
		`edge_backend_admin_state{backend="b1",pool="app",state="ready"} 0`,
		`edge_backend_admin_state{backend="b2",pool="app",state="ready"} 1`,
		`edge_connections_closed_total{pool="app",reason="admin_drain"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "admin"))
		}
	}

	s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b1/enable", "")
	if fresh := counts(s.dialOn(t, 2)); fresh["b1"] == 0 {
		t.Errorf("new connections after enable: %v, want b1 (it has none, b2 has many)", fresh)
	}
}

// TestAdminAPIWeightAndDisable: a weight set through the API shows in
// /status and metrics, steers new connections, survives a reload; disable
// keeps new connections away and leaves live ones; 404 and 400 for
// unknown names and bad bodies.
func TestAdminAPIWeightAndDisable(t *testing.T) {
	bs := backends(t, "b1", "b2")
	s := newSetup(t, bs, "least_conn", "")
	p := startEdge(t, s.cfg)

	doc := s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b2/weight", `{"weight": 5}`)
	if doc["weight"] != float64(5) || doc["declared_weight"] != float64(1) || doc["weight_overridden"] != true {
		t.Fatalf("weight answer: %v", doc)
	}
	got := counts(s.dialOn(t, 12))
	// Least connections compares (active+1)/weight: with weights 1 and 5
	// twelve connections split 2 and 10.
	if got["b1"] != 2 || got["b2"] != 10 {
		t.Errorf("12 connections with weights 1:5: got %v, want b1 2, b2 10", got)
	}
	if st := s.statusBackend(t, "app", "b2"); st["weight"] != float64(5) || st["weight_overridden"] != true {
		t.Errorf("/status b2: %v, want weight 5 (overridden)", st)
	}
	if m := s.metricsText(t); !strings.Contains(m, `edge_backend_weight{address="`+bs[1].Addr()+`",backend="b2",pool="app"} 5`) {
		t.Errorf("/metrics: edge_backend_weight of b2 is not 5:\n%s", grepLines(m, "edge_backend_weight"))
	}

	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	if st := s.statusBackend(t, "app", "b2"); st["weight"] != float64(5) {
		t.Errorf("/status b2 after reload: %v, want the weight 5 kept", st)
	}

	live := s.dialOn(t, 1)
	s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b2/disable", "{}")
	if fresh := counts(s.dialOn(t, 4)); fresh["b2"] != 0 {
		t.Errorf("new connections with b2 disabled: %v", fresh)
	}
	for _, cs := range live {
		for _, c := range cs {
			if got := testkit.Ask(t, c, "alive"); got != "alive" {
				t.Errorf("live connection after disable: %q", got)
			}
		}
	}
	if st := s.statusBackend(t, "app", "b2"); st["admin_state"] != "disabled" {
		t.Errorf("/status b2: %v, want disabled", st)
	}
	s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b2/enable", "")
	s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b2/weight", `{"weight": 0}`)
	if st := s.statusBackend(t, "app", "b2"); st["admin_state"] != "ready" || st["weight"] != float64(1) {
		t.Errorf("/status b2 after enable and weight 0: %v, want ready, weight 1", st)
	}

	pools := s.mustAPI(t, "GET", "/api/v1/pools", "")
	if ps := pools["pools"].([]any); len(ps) != 1 || len(ps[0].(map[string]any)["backends"].([]any)) != 2 {
		t.Errorf("GET /api/v1/pools: %v", pools)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/api/v1/pools/nope", "", 404},
		{"POST", "/api/v1/pools/app/backends/nope/drain", "", 404},
		{"POST", "/api/v1/pools/app/backends/b1/weight", `{"weight": -1}`, 400},
		{"POST", "/api/v1/pools/app/backends/b1/weight", `{"weight": 1000001}`, 400},
		{"POST", "/api/v1/pools/app/backends/b1/weight", `{}`, 400},
		{"POST", "/api/v1/pools/app/backends/b1/weight", `{"wieght": 2}`, 400},
		{"POST", "/api/v1/pools/app/backends/b1/drain", `{"window": "forever"}`, 400},
		{"GET", "/api/v1/nothing", "", 404},
	} {
		if code, doc := s.apiCall(t, tc.method, tc.path, tc.body, nil); code != tc.want || doc["error"] == nil {
			t.Errorf("%s %s %s: got %d %v, want %d with an error", tc.method, tc.path, tc.body, code, doc, tc.want)
		}
	}
}

// TestAdminAPIAuth: with a token every write needs it; a browser's
// cross-site write and a non-JSON body are refused even with it; without a
// token in the file, writes need the one edge generated, also on loopback,
// and a foreign Host (DNS rebinding) gets 421; write: false refuses writes
// and keeps reads; enabled: false hides the API.
func TestAdminAPIAuth(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	base := readFile(t, s.cfg)
	adminLine := fmt.Sprintf("admin: {address: %q}\n", s.admin)
	withAPI := func(api string) {
		writeFile(t, s.cfg, strings.Replace(base, adminLine, fmt.Sprintf("admin: {address: %q, api: %s}\n", s.admin, api), 1))
	}
	const token = "admin-token-0123456789abcdef"
	withAPI(`{token_env: EDGE_TEST_ADMIN_TOKEN}`)
	p := startEdgeEnv(t, s.cfg, "EDGE_TEST_ADMIN_TOKEN="+token)
	const drain = "/api/v1/pools/app/backends/b1/disable"
	bearer := map[string]string{"Authorization": "Bearer " + token}
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no token", map[string]string{"Authorization": ""}, 401},
		{"wrong token", map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(token))}, 401},
		{"token, text/plain body", map[string]string{"Authorization": "Bearer " + token, "Content-Type": "text/plain"}, 415},
		{"token, cross-site browser", map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, 403},
		{"token, foreign Origin", map[string]string{"Authorization": "Bearer " + token, "Origin": "https://evil.example"}, 403},
		{"token", bearer, 200},
	} {
		if code, doc := s.apiCall(t, "POST", drain, "", tc.hdr); code != tc.want {
			t.Errorf("%s: got %d %v, want %d", tc.name, code, doc, tc.want)
		}
	}
	if code, _ := s.apiCall(t, "GET", "/api/v1/pools", "", nil); code != 200 {
		t.Errorf("read without token: got %d, want 200", code)
	}

	withAPI(`{}`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitCount(t, p, "configuration reloaded", 1)
	// No token in the file: the one edge generated in state_dir, which
	// every write needs, on loopback too.
	noToken := map[string]string{"Authorization": ""}
	if code := s.rawStatus(t, "POST", drain, map[string]string{"Host": "rebound.evil.example:80", "Authorization": ""}); code != 421 {
		t.Errorf("no token, loopback, foreign Host: got %d, want 421", code)
	}
	if code, doc := s.apiCall(t, "POST", "/api/v1/pools/app/backends/b1/enable", "", noToken); code != 401 {
		t.Errorf("no token, loopback: got %d %v, want 401", code, doc)
	}
	if code, doc := s.apiCall(t, "POST", "/api/v1/pools/app/backends/b1/enable", "", nil); code != 200 {
		t.Errorf("generated token, loopback: got %d %v, want 200", code, doc)
	}

	withAPI(`{write: false}`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitCount(t, p, "configuration reloaded", 2)
	if code, doc := s.apiCall(t, "POST", drain, "", noToken); code != 403 {
		t.Errorf("write: false: got %d %v, want 403", code, doc)
	}
	if code, _ := s.apiCall(t, "GET", "/api/v1/pools", "", nil); code != 200 {
		t.Errorf("write: false, read: got %d, want 200", code)
	}

	withAPI(`{enabled: false}`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitCount(t, p, "configuration reloaded", 3)
	for _, path := range []string{"/api/v1/pools", drain} {
		method := "GET"
		if path == drain {
			method = "POST"
		}
		req, _ := http.NewRequest(method, "http://"+s.admin+path, nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("enabled: false, %s %s: got %d, want 404", method, path, resp.StatusCode)
		}
	}
}

// rawStatus sends one request to the admin listener with hdr (Host sets
// the Host) and returns the status, whatever the body.
func (s *setup) rawStatus(t *testing.T, method, path string, hdr map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.admin+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitCount waits until the log holds s at least n times.
func waitCount(t *testing.T, p *proc, s string, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for strings.Count(p.logs(), s) < n {
		select {
		case <-p.seen:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("log never showed %q %d times; log:\n%s", s, n, p.logs())
		}
	}
}

// TestStatusPageInChromium: the admin listener's / renders in Debian's
// headless Chromium with pools, backends, their states, counts and
// weights; a backend ID that is markup from Consul renders as text and
// runs nothing; the page loads nothing else and refreshes itself. The
// screenshot is docs/status-page.png when EDGE_UPDATE_SCREENSHOT=1.
func TestStatusPageInChromium(t *testing.T) {
	chromium := interop.Chromium(t)
	bs := backends(t, "b1", "b2", "b3")
	s := newSetup(t, bs, "least_conn", "")
	const evil = "<script>alert(1)</script>"
	cfg := readFile(t, s.cfg)
	cfg = strings.Replace(cfg, "routes:\n  - {default: true, pool: app}\n", "routes:\n  - {default: true, pool: app}\n  - {hosts: [chat.example.com], pool: chat}\n", 1)
	cfg += fmt.Sprintf("  - name: chat\n    backends:\n      - {id: %q, address: %q}\n      - {id: c2, address: %q}\n", evil, bs[2].Addr(), bs[2].Addr())
	writeFile(t, s.cfg, cfg)
	startEdge(t, s.cfg)
	// One connection on each backend at least: least_conn's two random
	// choices may well put two of three dials on one backend.
	s.spread(t, 1, "b1", "b2", "b3")
	s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b2/drain", `{"window": "0s"}`)
	s.mustAPI(t, "POST", "/api/v1/pools/app/backends/b3/weight", `{"weight": 3}`)
	s.mustAPI(t, "POST", "/api/v1/pools/chat/backends/c2/disable", "")

	shot := filepath.Join(t.TempDir(), "status-page.png")
	if os.Getenv("EDGE_UPDATE_SCREENSHOT") == "1" {
		shot, _ = filepath.Abs("../../docs/status-page.png")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := interop.Node(t, ctx, "testdata/statuspage.js", chromium, "http://"+s.admin+"/", shot)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("statuspage.js: %v", err)
	}
	var page struct {
		Title, Refresh, Active, Drain string
		Scripts                       int
		Pools, Listeners, Routes      []string
		Certs                         int
		Backends                      []struct{ Pool, ID, State, Active, Weight string }
		Dialogs, Requests             []string
	}
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("statuspage.js output %q: %v", out, err)
	}
	t.Logf("screenshot: %s", shot)
	if !strings.HasPrefix(page.Title, "edge ") || page.Refresh != "5" || page.Scripts != 0 {
		t.Errorf("title %q refresh %q scripts %d: want an edge title, a 5 s refresh, no script", page.Title, page.Refresh, page.Scripts)
	}
	if len(page.Dialogs) != 0 {
		t.Errorf("the page opened dialogs %v: markup from a backend ID ran", page.Dialogs)
	}
	if len(page.Requests) != 1 {
		t.Errorf("the page loaded %v; want itself only", page.Requests)
	}
	if strings.Join(page.Pools, ",") != "app,chat" || strings.Join(page.Listeners, ",") != "wss,ws" || strings.Join(page.Routes, ",") != "app,chat" || page.Certs != 1 {
		t.Errorf("pools %v listeners %v routes %v certs %d", page.Pools, page.Listeners, page.Routes, page.Certs)
	}
	want := map[string]string{
		"app/b1": "available", "app/b2": "drain", "app/b3": "available",
		"chat/" + evil: "available", "chat/c2": "disabled",
	}
	active := 0
	for _, b := range page.Backends {
		key := b.Pool + "/" + b.ID
		if want[key] != b.State {
			t.Errorf("backend %s: state %q, want %q", key, b.State, want[key])
		}
		delete(want, key)
		var n int
		fmt.Sscan(b.Active, &n)
		active += n
		if key == "app/b3" && !strings.HasPrefix(b.Weight, "3 (set; declared 1)") {
			t.Errorf("app/b3 weight cell %q, want 3 (set; declared 1)", b.Weight)
		}
	}
	if len(want) != 0 {
		t.Errorf("backends missing from the page: %v (rendered %+v)", want, page.Backends)
	}
	// b2's connections were drained; b1's and b3's stay.
	if page.Active == "" || active < 2 {
		t.Errorf("active: overview %q, backend rows sum %d; want the live connections counted", page.Active, active)
	}
	if !strings.Contains(page.Drain, "serving") {
		t.Errorf("drain cell %q, want serving", page.Drain)
	}
}

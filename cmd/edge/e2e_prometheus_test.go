package main

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	fleetpkg "github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/consul/api"
	"golang.org/x/crypto/ocsp"
)

// prometheusBin is the Prometheus 3 server scripts/prometheus.sh builds
// (Debian's 2.42 lacks Consul service discovery). Without it the test is
// skipped, or fails under EDGE_REQUIRE_INTEROP=1 (scripts/test.sh).
func prometheusBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("EDGE_PROMETHEUS_BIN")
	if bin == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		bin = filepath.Join(cache, "edge", "prometheus-v0.316.0", "prometheus")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("EDGE_REQUIRE_INTEROP") == "1" {
			t.Fatalf("prometheus %s: %v; build it with scripts/prometheus.sh (or set EDGE_PROMETHEUS_BIN)", bin, err)
		}
		t.Skipf("prometheus %s: %v; build it with scripts/prometheus.sh (or set EDGE_PROMETHEUS_BIN)", bin, err)
	}
	return bin
}

// promtoolBin is Debian's promtool, skipped or required like prometheusBin.
func promtoolBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("EDGE_REQUIRE_INTEROP") == "1" {
			t.Fatal("promtool is missing (Debian package prometheus); scripts/test.sh installs it")
		}
		t.Skip("promtool is missing (Debian package prometheus)")
	}
	return p
}

// ocspPKI is a CA whose leaf names an OCSP responder run by the test, so
// edge staples and the staple gauges have something to report.
type ocspPKI struct {
	roots             *x509.CertPool
	certFile, keyFile string
	ca                *x509.Certificate
	caKey             crypto.Signer
	responder         *httptest.Server
	nextUpdate        time.Duration
}

func newOCSPPKI(t *testing.T, dir string) *ocspPKI {
	t.Helper()
	p := &ocspPKI{nextUpdate: 4 * 24 * time.Hour}
	p.responder = httptest.NewServer(http.HandlerFunc(p.answer))
	t.Cleanup(p.responder.Close)
	ca := testkit.NewCA(t, "edge test CA")
	p.ca, p.caKey = ca.Cert, ca.Key
	leaf := ca.Issue(t, testkit.CertOptions{
		Hosts: []string{"localhost", "127.0.0.1"}, NotAfter: time.Now().Add(30 * 24 * time.Hour), OCSPServer: p.responder.URL,
	})
	p.certFile, p.keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testkit.WriteFile(t, p.certFile, leaf.CertPEM())
	testkit.WriteFile(t, p.keyFile, leaf.KeyPEM(t))
	p.roots = ca.Pool()
	return p
}

// answer is an OCSP responder (RFC 6960) saying "good" for every serial.
func (p *ocspPKI) answer(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := ocsp.ParseRequest(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now().Add(-time.Minute)
	resp, err := ocsp.CreateResponse(p.ca, p.ca, ocsp.Response{
		Status: ocsp.Good, SerialNumber: req.SerialNumber,
		ThisUpdate: now, NextUpdate: now.Add(p.nextUpdate),
	}, p.caKey)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/ocsp-response")
	_, _ = w.Write(resp)
}

// fleetEdge is one edge of the monitored fleet.
type fleetEdge struct {
	dir, cfg, wss, ws, admin, metrics string
	p                                 *proc
}

// writeFleetEdge writes the config of one edge: a pool followed in Consul
// and health-checked, a pool whose only backend is down (dial failures, a
// refused request), one whose health checks fail, one whose Consul query
// always fails (a datacenter that does not exist), self-registration, a
// fleet prefix (operator actions of fleet scope), and extra.
func writeFleetEdge(t *testing.T, agent *consultest.Agent, pki *ocspPKI, extra string) *fleetEdge {
	t.Helper()
	e := &fleetEdge{dir: t.TempDir(), wss: testkit.ClosedPort(t), ws: testkit.ClosedPort(t), admin: testkit.ClosedPort(t), metrics: testkit.ClosedPort(t)}
	e.cfg = filepath.Join(e.dir, "edge.yaml")
	writeFile(t, e.cfg, fmt.Sprintf(`admin: {address: %q}
metrics: {address: %q}
listeners:
  - {name: wss, address: %q, tls: {certificates: [{cert_file: %q, key_file: %q}]}}
  - {name: ws, address: %q}
routes:
  - {default: true, pool: app}
  - {hosts: [dead.test], pool: dead}
  - {hosts: [ghost.test], pool: ghost}
  - {hosts: [sick.test], pool: sick}
pools:
  - name: app
    consul: {service: app}
    health: {type: websocket, interval: 1s, timeout: 500ms, rise: 1, fall: 1}
    rebalance: {enabled: true}
  - name: dead
    backends: [{id: gone, address: %q}]
    retries: 0
  - name: sick
    backends: [{id: down, address: %q}]
    health: {type: tcp, interval: 1s, timeout: 500ms, rise: 1, fall: 1}
  - name: ghost
    consul: {service: ghost, datacenter: nowhere}
consul: {address: %q, register: {enabled: true}, fleet: {prefix: edge/fleet}}
auth:
  providers:
    - {name: idp, issuer: "https://id.test", algorithms: [ES256], jwks_file: %q}
%s`, e.admin, e.metrics, e.wss, pki.certFile, pki.keyFile, e.ws, testkit.ClosedPort(t), testkit.ClosedPort(t), agent.Addr,
		writeJWKS(t, e.dir), extra))
	return e
}

// writeJWKS writes a JWK Set of one fresh P-256 key into dir, for a token
// provider whose keys exist from the first scrape.
func writeJWKS(t *testing.T, dir string) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pt, _ := k.PublicKey.Bytes()
	enc := base64.RawURLEncoding.EncodeToString
	path := filepath.Join(dir, "jwks.json")
	writeFile(t, path, fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":%q,"y":%q}]}`, enc(pt[1:33]), enc(pt[33:])))
	return path
}

// prom is a running Prometheus server.
type prom struct {
	addr string
	out  *testkit.Buffer
}

// startPrometheus runs bin with the shipped deploy/prometheus/scrape.yml,
// changing only the Consul address and, so the test takes seconds, the
// scrape interval (15s to 1s).
func startPrometheus(t *testing.T, bin, consulAddr string) *prom {
	t.Helper()
	shipped := readFile(t, "../../deploy/prometheus/scrape.yml")
	cfg := shipped
	for old, repl := range map[string]string{"server: 127.0.0.1:8500": "server: " + consulAddr, "scrape_interval: 15s": "scrape_interval: 1s"} {
		if strings.Count(cfg, old) != 1 {
			t.Fatalf("deploy/prometheus/scrape.yml: want exactly one %q to substitute:\n%s", old, shipped)
		}
		cfg = strings.Replace(cfg, old, repl, 1)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "prometheus.yml")
	writeFile(t, file, cfg)
	p := &prom{addr: testkit.ClosedPort(t), out: &testkit.Buffer{}}
	cmd := exec.Command(bin, "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.out.String())
		}
	})
	testkit.Await(t, 60*time.Second, "prometheus ready", func() (bool, string) {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", p.out.String())
		default:
		}
		resp, err := http.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// promSample is one sample of an instant query's answer.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// query evaluates expr now through the HTTP API.
func (p *prom) query(t *testing.T, expr string) ([]promSample, error) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, out.Error)
	}
	if out.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", expr, out.Data.ResultType)
	}
	var ss []promSample
	err = json.Unmarshal(out.Data.Result, &ss)
	return ss, err
}

// panelExpr is one query of the shipped dashboard.
type panelExpr struct {
	panel, refID, expr string
}

// dashboardExprs reads every query of deploy/grafana/edge-dashboard.json
// with the dashboard variables replaced: the job, every instance, every
// pool, and a rate interval of 1m (four scrapes at the test's interval).
func dashboardExprs(t *testing.T) (rows []string, exprs []panelExpr) {
	t.Helper()
	var d struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, "../../deploy/grafana/edge-dashboard.json")), &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer(`"$job"`, `"edge"`, `"$instance"`, `".*"`, `"$pool"`, `".*"`, "$__rate_interval", "1m")
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			e := vars.Replace(tg.Expr)
			if strings.Contains(e, "$") {
				t.Errorf("panel %q: unknown variable in %s", p.Title, tg.Expr)
			}
			exprs = append(exprs, panelExpr{panel: p.Title, refID: tg.RefID, expr: e})
		}
	}
	return rows, exprs
}

// TestPrometheusFindsFleetAndEveryPanelHasData: a real Consul agent, two
// edge processes registering themselves, and a real Prometheus with the
// shipped scrape config (only the Consul address substituted, and a 1s
// scrape interval). Prometheus must find both edges' metrics listeners
// through Consul and scrape them up; before any traffic, every query of
// the shipped dashboard must already return data (failure counters exist
// at zero from the first scrape); then, after traffic that exercises
// every panel (connections, closes, full and resumed handshakes, a refused
// request, failing health checks, a discovery update and a failing
// discovery query, a drain), every query of the shipped dashboard must
// return at least one series.
func TestPrometheusFindsFleetAndEveryPanelHasData(t *testing.T) {
	bin := prometheusBin(t)
	agent := consultest.Start(t)
	pki := newOCSPPKI(t, t.TempDir())
	bs := backends(t, "b1", "b2")
	registerBackend(t, agent.Client, "app", bs[0])

	// A canary of fleet scope on app, as an operator would set through any
	// edge, so the rebalancing row's canary series exist from the start.
	canary := `{"v":1,"canary":{"version":"v2","share":0.1},"at":"2026-01-01T00:00:00Z"}`
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: fleetpkg.ControlKey("edge/fleet", "app"), Value: []byte(canary)}, nil); err != nil {
		t.Fatal(err)
	}
	e1 := writeFleetEdge(t, agent, pki, "drain: {window: 0s, timeout: 5s}\n")
	// The second edge keeps serving for a while once its drain has begun,
	// so the drain is scraped while it runs.
	e2 := writeFleetEdge(t, agent, pki, "drain: {delay: 2m, window: 0s, timeout: 5s}\n")
	fleet := []*fleetEdge{e1, e2}
	for _, e := range fleet {
		e.p = startEdge(t, e.cfg)
		e.p.waitLog(t, `"service":"edge-metrics"`)
	}
	ids := map[string]bool{}
	svcs, err := agent.Client.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range svcs {
		if s.Service == "edge" || s.Service == "edge-metrics" {
			ids[id] = true
		}
	}
	if len(ids) != 4 {
		t.Fatalf("two edges on one host: want 4 distinct service IDs (edge and edge-metrics each), got %v", ids)
	}

	p := startPrometheus(t, bin, agent.Addr)
	want := []string{e1.metrics, e2.metrics}
	slices.Sort(want)
	testkit.Await(t, 90*time.Second, "both edges up in Prometheus", func() (bool, string) {
		ss, err := p.query(t, `up{job="edge"} == 1`)
		if err != nil {
			return false, err.Error()
		}
		var got []string
		for _, s := range ss {
			got = append(got, s.Metric["instance"])
		}
		slices.Sort(got)
		return slices.Equal(got, want), fmt.Sprintf("up instances %v, want the metrics listeners %v", got, want)
	})

	// Before any traffic, as soon as Prometheus holds two scrapes of each
	// edge (what rate() needs), every query of the dashboard has data:
	// series that count failures exist at zero, not from the first failure.
	testkit.Await(t, 30*time.Second, "two scrapes of each edge", func() (bool, string) {
		ss, err := p.query(t, `count_over_time(up{job="edge"}[1m]) >= 2`)
		return err == nil && len(ss) == 2, fmt.Sprintf("%v %v", ss, err)
	})
	_, exprs := dashboardExprs(t)
	var none []string
	for _, pe := range exprs {
		ss, err := p.query(t, pe.expr)
		if err != nil {
			t.Fatalf("panel %q %s: %v", pe.panel, pe.refID, err)
		}
		if len(ss) == 0 {
			none = append(none, pe.panel+" "+pe.refID+": "+pe.expr)
		}
	}
	if len(none) > 0 {
		t.Errorf("%d of %d dashboard queries have no data before the first event:\n%s", len(none), len(exprs), strings.Join(none, "\n"))
	}

	for _, e := range fleet {
		fleetTraffic(t, e, pki)
	}
	// A discovery update: a second backend joins the pool.
	registerBackend(t, agent.Client, "app", bs[1])
	testkit.Await(t, 30*time.Second, "discovery update seen by Prometheus", func() (bool, string) {
		ss, err := p.query(t, `edge_pool_backends{job="edge", pool="app"} == 2`)
		return err == nil && len(ss) == 2, fmt.Sprintf("%v %v", ss, err)
	})
	// A drain, scraped while it runs.
	if err := e2.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, 30*time.Second, "drain seen by Prometheus", func() (bool, string) {
		ss, err := p.query(t, `edge_draining{job="edge"} == 1`)
		return err == nil && len(ss) == 1 && ss[0].Metric["instance"] == e2.metrics, fmt.Sprintf("%v %v", ss, err)
	})

	rows, exprs := dashboardExprs(t)
	if want := []string{"Clients", "Backends", "TLS", "Discovery", "Drain", "Fleet", "Tokens", "Rebalancing"}; !slices.Equal(rows, want) {
		t.Errorf("dashboard rows %q, want %q", rows, want)
	}
	empty := map[int]string{}
	testkit.Await(t, 60*time.Second, "every dashboard query returns data", func() (bool, string) {
		clear(empty)
		for i, pe := range exprs {
			ss, err := p.query(t, pe.expr)
			if err != nil {
				t.Fatalf("panel %q %s: %v", pe.panel, pe.refID, err)
			}
			if len(ss) == 0 {
				empty[i] = pe.panel + " " + pe.refID + ": " + pe.expr
			}
		}
		return len(empty) == 0, fmt.Sprintf("%d of %d queries without data: %v", len(empty), len(exprs), empty)
	})
	panels := map[string]bool{}
	for _, pe := range exprs {
		panels[pe.panel] = true
	}
	t.Logf("%d of %d panels (%d queries) have data through Prometheus", len(panels), len(panels), len(exprs))
}

// fleetTraffic drives what the dashboard shows through one edge: a full
// and a resumed TLS handshake on wss, WebSocket sessions closed with a
// code, and a request refused because the pool's backend is down.
func fleetTraffic(t *testing.T, e *fleetEdge, pki *ocspPKI) {
	t.Helper()
	// The staple is fetched before the certificate is served (conf:
	// tls.ocsp), so the first handshake carries it.
	cache := tls.NewLRUClientSessionCache(4)
	d := testkit.Dialer(pki.roots, "")
	d.TLSClientConfig.ClientSessionCache = cache
	var resumed []bool
	for range 2 {
		c, _, err := d.Dial("wss://"+e.wss+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Ask(t, c, "hello")
		cs := c.UnderlyingConn().(*tls.Conn).ConnectionState()
		resumed = append(resumed, cs.DidResume)
		if len(cs.OCSPResponse) == 0 {
			t.Error("no OCSP staple in the handshake")
		}
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
		_, _, _ = c.ReadMessage()
		c.Close()
	}
	if !slices.Equal(resumed, []bool{false, true}) {
		t.Errorf("handshakes resumed %v, want a full one then a resumed one", resumed)
	}
	c, resp, err := websocket.DefaultDialer.Dial("ws://"+e.ws+"/", http.Header{"Host": {"dead.test"}})
	if err == nil {
		c.Close()
		t.Fatal("a pool with no reachable backend accepted a WebSocket")
	}
	if resp == nil || resp.StatusCode < 500 {
		t.Fatalf("dead pool: got %v, %v; want a 5xx from edge", resp, err)
	}
	resp.Body.Close()
}

// TestMetricsListenerServesOnlyMetricsLintClean: the metrics listener
// answers /metrics and /healthz and nothing of the admin API, and what it
// exports passes `promtool check metrics` without a warning (naming,
// units, _total on counters, help text).
func TestMetricsListenerServesOnlyMetricsLintClean(t *testing.T) {
	promtool := promtoolBin(t)
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	m := testkit.ClosedPort(t)
	writeFile(t, s.cfg, fmt.Sprintf("metrics: {address: %q}\n%s", m, readFile(t, s.cfg)))
	startEdge(t, s.cfg)
	for _, u := range []string{"wss://" + s.wss + "/", "ws://" + s.ws + "/"} {
		c, _, err := s.dialer().Dial(u, nil)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Ask(t, c, "x")
		c.Close()
	}
	for path, want := range map[string]int{"/healthz": 200, "/metrics": 200, "/readyz": 404, "/status": 404, "/debug/pprof/": 404} {
		resp, err := http.Get("http://" + m + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("metrics listener %s: got %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Get("http://" + m + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"edge_ready 1", "edge_draining 0", `edge_tls_certificate_not_after_timestamp_seconds{cert_file=`, `edge_tls_ticket_key_rotation_interval_seconds{listener="wss"} 3600`, `edge_connections_opened_total{backend="b1",pool="app"}`} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

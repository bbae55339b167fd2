package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
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
		CookieKeys []fleet.CookieKeysStatus `json:"cookie_keys"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, a.admin, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.CookieKeys) != 1 || st.CookieKeys[0].Keys != 3 || st.CookieKeys[0].Key != key {
		t.Fatalf("/status cookie_keys: %+v", st.CookieKeys)
	}
}

// ocspResponder is `openssl ocsp` answering "good" for one leaf, counting
// the requests it answers (-text prints each one).
type ocspResponder struct {
	out *testkit.Buffer
	url string
}

func (r *ocspResponder) requests() int { return strings.Count(r.out.String(), "OCSP Request Data:") }

// startOCSPResponder writes ca and leaf's index for openssl and runs its
// responder on a free loopback port (answers valid for an hour).
func startOCSPResponder(t *testing.T, dir string, ca *testkit.CA, port string, leaf *x509.Certificate) *ocspResponder {
	t.Helper()
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed")
	}
	caFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	testkit.WriteFile(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}))
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	serial := fmt.Sprintf("%X", leaf.SerialNumber)
	if len(serial)%2 == 1 {
		serial = "0" + serial
	}
	idx := filepath.Join(dir, "index.txt")
	testkit.WriteFile(t, idx, fmt.Appendf(nil, "V\t%s\t\t%s\tunknown\t/CN=%s\n", leaf.NotAfter.UTC().Format("060102150405Z"), serial, leaf.Subject.CommonName))
	testkit.WriteFile(t, idx+".attr", []byte("unique_subject = no\n"))
	_, p, _ := net.SplitHostPort(port)
	r := &ocspResponder{out: &testkit.Buffer{}, url: "http://" + port}
	// Line-buffered: openssl writes its -text through stdio, which a pipe
	// would otherwise hold until exit.
	cmd := exec.Command("stdbuf", "-oL", bin, "ocsp", "-index", idx, "-CA", caFile, "-rsigner", caFile, "-rkey", keyFile,
		"-port", p, "-nmin", "60", "-text", "-ignore_err")
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Listening is asked of the kernel: a probe connection can wedge
	// openssl 3.0's single-threaded responder.
	testkit.WaitFor(t, "openssl ocsp listening", func() bool {
		out, _ := exec.Command("ss", "-ltnH").Output()
		return strings.Contains(string(out), ":"+p+" ")
	})
	return r
}

// stapleOf runs `openssl s_client -status` against s's TLS listener and
// returns its output.
func stapleOf(t *testing.T, s *setup, caFile string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "openssl", "s_client", "-connect", s.wss, "-servername", "localhost", "-status", "-CAfile", caFile)
	cmd.Stdin = strings.NewReader("")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// TestFleetSharesOCSPStaples: three edges start together with one Consul
// and an `openssl ocsp` responder: one of them (holding the Consul lock)
// asks the responder, stores the answer in KV, and all three staple it.
// A fourth edge started later staples the stored answer from its first
// handshake. The responder answers one request in all.
func TestFleetSharesOCSPStaples(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2")
	dir := t.TempDir()
	ca := testkit.NewCA(t, "edge fleet test CA")
	port := testkit.ClosedPort(t)
	leaf := ca.Issue(t, testkit.CertOptions{Hosts: []string{"localhost", "127.0.0.1"}, OCSPServer: "http://" + port})
	certFile, keyFile := leaf.Write(t, dir, "leaf")
	r := startOCSPResponder(t, dir, ca, port, leaf.Cert)

	mk := func() *setup {
		s := &setup{dir: t.TempDir(), wss: testkit.ClosedPort(t), ws: testkit.ClosedPort(t), admin: testkit.ClosedPort(t), roots: ca.Pool()}
		s.cfg = filepath.Join(s.dir, "edge.yaml")
		s.write(t, bs, "least_conn", fmt.Sprintf("consul: {address: %q}\n", agent.Addr), certFile, keyFile)
		body := strings.Replace(readFile(t, s.cfg), "}]\n", "}]\n      ocsp: {consul_prefix: edge}\n", 1)
		writeFile(t, s.cfg, body)
		return s
	}
	edges := []*setup{mk(), mk(), mk()}
	var procs []*proc
	for _, s := range edges {
		p := &proc{cmd: exec.Command(edgeBin, "-config", s.cfg), done: make(chan error, 1), seen: make(chan struct{}, 1)}
		p.cmd.Stdout, p.cmd.Stderr = p, p
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.done <- p.cmd.Wait() }()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.done
			if t.Failed() {
				t.Logf("edge log:\n%s", p.logs())
			}
		})
		procs = append(procs, p)
	}
	for _, p := range procs {
		p.waitLog(t, `"msg":"edge started"`)
	}
	caFile := filepath.Join(dir, "ca.pem")
	for i, s := range edges {
		if out := stapleOf(t, s, caFile); !strings.Contains(out, "OCSP Response Status: successful") || !strings.Contains(out, "Cert Status: good") {
			t.Fatalf("edge %c staples no good response:\n%s", 'A'+i, out)
		}
	}
	if n := r.requests(); n != 1 {
		t.Fatalf("responder answered %d requests for three edges, want 1:\n%s", n, r.out.String())
	}
	pairs, _, err := agent.Client.KV().List("edge/ocsp/", nil)
	if err != nil {
		t.Fatal(err)
	}
	staples := 0
	for _, p := range pairs {
		switch {
		case strings.HasSuffix(p.Key, ".lock"):
			if p.Session != "" {
				t.Errorf("lock %s still held by session %s", p.Key, p.Session)
			}
		default:
			staples++
		}
	}
	if staples != 1 {
		t.Fatalf("shared staples in KV: %d, want 1", staples)
	}

	d := mk()
	startEdge(t, d.cfg)
	if out := stapleOf(t, d, caFile); !strings.Contains(out, "Cert Status: good") {
		t.Fatalf("edge D's first handshake staples no good response:\n%s", out)
	}
	if n := r.requests(); n != 1 {
		t.Fatalf("responder answered %d requests after edge D joined, want still 1", n)
	}
}

// TestFleetSlowStartRampsNewBackend: three edges follow one Consul service
// with `slow_start: 20s`, and clients keep reconnecting through all of
// them. A fourth backend registered in Consul takes, summed over the
// three edges, about its ramped share of the mean at every step, never
// the flood of every comparison it is drawn into; at the end of the ramp
// it has caught up.
func TestFleetSlowStartRampsNewBackend(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "b3", "b4")
	for _, b := range bs[:3] {
		registerBackend(t, agent.Client, "app", b)
	}
	var edges []*setup
	for range 3 {
		s := consulSetup(t, agent, "")
		writeFile(t, s.cfg, strings.Replace(readFile(t, s.cfg), "    consul: {service: app}\n", "    consul: {service: app}\n    slow_start: 20s\n", 1))
		startEdge(t, s.cfg)
		edges = append(edges, s)
	}
	backend := func(s *setup, id string) map[string]any {
		var doc struct {
			Pools []struct {
				Backends []map[string]any `json:"backends"`
			} `json:"pools"`
		}
		if err := json.Unmarshal([]byte(adminGet(t, s.admin, "/status")), &doc); err != nil {
			t.Fatal(err)
		}
		for _, p := range doc.Pools {
			for _, b := range p.Backends {
				if b["id"] == id {
					return b
				}
			}
		}
		return nil
	}
	available := func(s *setup, id string) bool {
		b := backend(s, id)
		return b != nil && b["available"] == true
	}
	for _, s := range edges {
		for _, b := range bs[:3] {
			testkit.WaitFor(t, "backend "+b.ID+" available on every edge", func() bool { return available(s, "consultest/app-"+b.ID) })
		}
	}
	const perEdge, churn = 40, 8
	conns := make([][]*websocket.Conn, len(edges))
	dial := func(i int) *websocket.Conn {
		c, _, err := edges[i].dialer().Dial("ws://"+edges[i].ws+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for i := range edges {
		for range perEdge {
			conns[i] = append(conns[i], dial(i))
		}
	}
	t.Cleanup(func() {
		for _, cs := range conns {
			for _, c := range cs {
				c.Close()
			}
		}
	})

	registerBackend(t, agent.Client, "app", bs[3])
	newID := "consultest/app-b4"
	for _, s := range edges {
		testkit.WaitFor(t, "b4 available on every edge", func() bool { return available(s, newID) })
	}
	mean := float64(perEdge*len(edges)) / 4
	r := rand.New(rand.NewPCG(5, 6))
	ramped := false
	for round := 0; ; round++ {
		for i := range edges {
			for range churn {
				k := r.IntN(len(conns[i]))
				conns[i][k].Close()
				conns[i][k] = dial(i)
			}
		}
		// Closed connections leave the counts as their backend sees the
		// close; the gauges read right after a round may still hold a few.
		var held float64
		share := 1.0
		for _, s := range edges {
			b := backend(s, newID)
			held += b["active"].(float64)
			if v, ok := b["slow_start_share"].(float64); ok {
				share = min(share, v)
			}
		}
		if round == 0 && share == 1 {
			t.Fatal("the new backend is at full weight on joining; want a ramp")
		}
		if limit := share*mean*1.25 + 2*float64(len(edges)) + churn; held > limit {
			t.Fatalf("round %d, share %.3f: the new backend holds %v connections over the fleet, want at most %.1f (mean %.1f)", round, share, held, limit, mean)
		}
		if round%5 == 0 {
			t.Logf("round %d: share %.3f, new backend %v connections over three edges, pool mean %.1f", round, share, held, mean)
		}
		if share == 1 {
			if ramped && held >= 0.5*mean {
				t.Logf("round %d: ramp over, new backend %v connections, mean %.1f", round, held, mean)
				return
			}
			ramped = true
		}
		if round > 2000 {
			t.Fatalf("the new backend never caught up: %v connections, mean %.1f", held, mean)
		}
	}
}

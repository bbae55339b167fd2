package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testkit"
)

// movers is a run of testdata/rebalance_clients.js: Node ws clients that
// reconnect when moved, and what they reported.
type movers struct {
	lines  chan []string
	on     map[string]string // client -> backend
	moved  map[string]bool
	codes  []string // the close codes the clients got
	landed []string // where moved clients landed
	closes []time.Time
	wait   time.Duration // how long read waits; 90 s when 0
}

// startMovers runs n clients against url, one at a time, until the test
// ends.
func startMovers(t *testing.T, url string, n int) *movers {
	t.Helper()
	return startMoversOn(t, []string{url}, n, 1, 3*time.Minute)
}

// startMoversOn runs n clients over urls (one Node process each, n/len
// of them, conc handshakes at a time per process) until the test ends or
// limit passes.
func startMoversOn(t *testing.T, urls []string, n, conc int, limit time.Duration) *movers {
	t.Helper()
	m := &movers{lines: make(chan []string, 4096), on: map[string]string{}, moved: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	var wg sync.WaitGroup
	for i, url := range urls {
		cmd := interop.Node(t, ctx, filepath.Join("testdata", "rebalance_clients.js"), url,
			strconv.Itoa(n/len(urls)), strconv.Itoa(conc), fmt.Sprintf("%c", 'a'+i))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); _ = cmd.Wait() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				m.lines <- strings.Fields(sc.Text())
			}
		}()
	}
	go func() { wg.Wait(); close(m.lines) }()
	return m
}

// read takes the clients' reports until until holds.
func (m *movers) read(t *testing.T, until func() bool, what string) {
	t.Helper()
	deadline := time.After(cmp.Or(m.wait, 90*time.Second))
	for !until() {
		select {
		case f, ok := <-m.lines:
			if !ok {
				t.Fatalf("clients ended waiting for %s", what)
			}
			switch {
			case len(f) == 3 && f[0] == "on":
				if m.moved[f[1]] {
					m.landed = append(m.landed, f[2])
				}
				m.on[f[1]] = f[2]
			case len(f) == 3 && f[0] == "closed":
				m.codes = append(m.codes, f[2])
				m.closes = append(m.closes, time.Now())
				m.moved[f[1]] = true
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s: %v", what, m.on)
		}
	}
}

// count is how many clients are on the backends named.
func (m *movers) count(backends ...string) int {
	n := 0
	for _, x := range m.on {
		for _, b := range backends {
			if x == b {
				n++
			}
		}
	}
	return n
}

// all1012 fails the test unless every close was 1012.
func (m *movers) all1012(t *testing.T) {
	t.Helper()
	for _, c := range m.codes {
		if c != "1012" {
			t.Fatalf("a moved client got close %s, want 1012: %v", c, m.codes)
		}
	}
}

// TestRebalanceAfterScaleOut: 20 Node ws clients on the only backend; a
// second backend is added by a reload; edge moves connections off the
// first, each with a close frame 1012, until both are within the
// tolerance, and every moved client that reconnects lands on the new one.
func TestRebalanceAfterScaleOut(t *testing.T) {
	bs := backends(t, "b1", "b2")
	const pool = "    rebalance: {enabled: true, tolerance: 0.1, settle: 1s, rate: 20, min_age: 0s}\n"
	s := newSetup(t, bs[:1], "least_conn", pool)
	p := startEdge(t, s.cfg)
	m := startMovers(t, "ws://"+s.ws+"/", 20)
	m.read(t, func() bool { return len(m.on) == 20 }, "20 clients on b1")
	if m.count("b1") != 20 {
		t.Fatalf("before the scale-out: %v", m.on)
	}
	s.write(t, bs, "least_conn", pool, filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem"))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	// Fair share 10 each; the episode ends within 1.05 of it.
	m.read(t, func() bool { return m.count("b1") <= 10 && m.count("b2") >= 10 }, "both backends within the band")
	m.all1012(t)
	onNew := 0
	for _, b := range m.landed {
		if b == "b2" {
			onNew++
		}
	}
	if len(m.landed) == 0 || onNew*100 < len(m.landed)*95 {
		t.Fatalf("%d of %d moved clients landed on b2, want at least 95 %%", onNew, len(m.landed))
	}
	t.Logf("%d clients moved, %d landed on the new backend", len(m.landed), onNew)
	if st := s.statusDoc(t); !strings.Contains(st, `"rebalance"`) || !strings.Contains(st, `"moved": `+strconv.Itoa(len(m.codes))) {
		t.Errorf("/status lacks the pool's rebalancing:\n%s", grepLines(st, "moved"))
	}
	if mt := s.metricsText(t); !strings.Contains(mt, `edge_rebalance_moved_total{pool="app"} `+strconv.Itoa(len(m.codes))) {
		t.Errorf("metrics:\n%s", grepLines(mt, "edge_rebalance"))
	}
}

// versioned gives the setup's backends versions in its file.
func (s *setup) versioned(t *testing.T, versions map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for id, v := range versions {
		text = strings.Replace(text, "{id: "+id+", ", fmt.Sprintf("{id: %s, version: %q, ", id, v), 1)
	}
	if err := os.WriteFile(s.cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCanaryPromotedMovesEveryConnection: a pool of two v1 backends and
// one v2; a canary of v2 at 10 % takes about a tenth of 40 Node ws
// clients; promoted to 100 % at 10 a second, every client on v1 is moved
// with 1012 and lands on v2, the budget is never exceeded, and /status
// and the metrics show the progress. Rolled back to 0 %, they all move
// back; a pause stops the moves.
func TestCanaryPromotedMovesEveryConnection(t *testing.T) {
	bs := backends(t, "b1", "b2", "b3")
	s := newSetup(t, bs, "cookie", "    cookie: {secret_env: EDGE_TEST_COOKIE}\n    rebalance: {min_age: 0s}\n")
	s.versioned(t, map[string]string{"b1": "v1", "b2": "v1", "b3": "v2"})
	t.Setenv("EDGE_TEST_COOKIE", "0123456789abcdef0123456789abcdef")
	startEdge(t, s.cfg)
	canary := func(body string) {
		t.Helper()
		if code, doc := s.apiCall(t, "POST", "/api/v1/pools/app/canary?scope=local", body, nil); code != 200 {
			t.Fatalf("canary %s: %d %v", body, code, doc)
		}
	}
	canary(`{"version":"v2","share":0.1}`)
	m := startMovers(t, "ws://"+s.ws+"/", 40)
	m.read(t, func() bool { return len(m.on) == 40 }, "40 clients")
	if n := m.count("b3"); n < 1 || n > 10 {
		t.Fatalf("%d of 40 clients on v2 at a 10 %% canary", n)
	}
	t.Logf("at 10 %%: %d of 40 on v2", m.count("b3"))

	start := time.Now()
	canary(`{"version":"v2","share":1,"rate":10}`)
	m.read(t, func() bool { return m.count("b3") == 40 }, "every client on v2")
	elapsed := time.Since(start)
	m.all1012(t)
	if len(m.codes) > int(10*elapsed.Seconds())+10 {
		t.Fatalf("%d moves in %s: over the budget of 10/s", len(m.codes), elapsed)
	}
	for _, b := range m.landed {
		if b != "b3" {
			t.Fatalf("a moved client landed on %s: %v", b, m.landed)
		}
	}
	t.Logf("promotion: %d moved in %s", len(m.codes), elapsed.Round(time.Millisecond))
	// The progress is read at the next tick.
	testkit.WaitFor(t, "/status to show the canary holding everything", func() bool {
		st := s.statusDoc(t)
		return strings.Contains(st, `"version": "v2"`) && strings.Contains(st, `"held": 1`)
	})
	if mt := s.metricsText(t); !strings.Contains(mt, `edge_canary_held{pool="app",version="v2"} 1`) {
		t.Errorf("metrics:\n%s", grepLines(mt, "edge_canary"))
	}

	// Paused, a rollback moves nothing; resumed, everyone goes back.
	if code, doc := s.apiCall(t, "POST", "/api/v1/pools/app/rebalance/pause?scope=local", "", nil); code != 200 {
		t.Fatalf("pause: %d %v", code, doc)
	}
	canary(`{"version":"v2","share":0,"rate":20}`)
	moved := len(m.codes)
	if _, doc := s.apiCall(t, "GET", "/api/v1/pools/app/canary", "", nil); doc["local_paused"] != true {
		t.Fatalf("GET canary: %v", doc)
	}
	if code, doc := s.apiCall(t, "POST", "/api/v1/pools/app/rebalance/resume?scope=local", "", nil); code != 200 {
		t.Fatalf("resume: %d %v", code, doc)
	}
	m.read(t, func() bool { return m.count("b1", "b2") == 40 }, "every client back on v1")
	m.all1012(t)
	t.Logf("rollback: %d moved", len(m.codes)-moved)
}

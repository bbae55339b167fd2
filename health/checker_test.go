package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/gorilla/websocket"
)

const awaitTimeout = 20 * time.Second

type probeEvent struct {
	backend string
	ok      bool
	healthy bool // the backend's health right after this result was applied
}

type recorder struct {
	ch   chan probeEvent
	pool *balance.Pool
}

// ProbeResult records the result with the health it left: the checker
// reports after applying it, from the goroutine that applies results, so a
// reader lagging behind the checker still sees each result's own effect.
func (r *recorder) ProbeResult(_ string, backend string, ok bool, _ time.Duration) {
	e := probeEvent{backend: backend, ok: ok}
	for _, b := range r.pool.Snapshot().Backends {
		if b.ID() == backend {
			e.healthy = b.Healthy()
		}
	}
	select {
	case r.ch <- e:
	default:
	}
}

var _ Observer = (*recorder)(nil)

// harness runs a Checker over a pool until the test ends.
type harness struct {
	pool *balance.Pool
	rec  *recorder
}

func startChecker(t *testing.T, opts Options, members ...balance.Member) *harness {
	t.Helper()
	pool, err := balance.NewPool(balance.PoolOptions{Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Update(members); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{ch: make(chan probeEvent, 10000), pool: pool}
	opts.Pool, opts.Source, opts.Observer = "p", pool, rec
	// A probe of a live loopback server must not time out on a slow,
	// busy machine; the timeout may not exceed the interval.
	if opts.Interval == 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.Rise == 0 {
		opts.Rise = 2
	}
	if opts.Fall == 0 {
		opts.Fall = 2
	}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
	})
	return &harness{pool: pool, rec: rec}
}

func (h *harness) backend(t *testing.T, id string) *balance.Backend {
	t.Helper()
	for _, b := range h.pool.Snapshot().Backends {
		if b.ID() == id {
			return b
		}
	}
	t.Fatalf("backend %s not in pool", id)
	return nil
}

// await waits for probe results of id until one leaves its health at want,
// and returns the results seen on the way.
func (h *harness) await(t *testing.T, id string, want bool) []bool {
	t.Helper()
	var seen []bool
	timeout := time.After(awaitTimeout)
	for {
		select {
		case e := <-h.rec.ch:
			if e.backend != id {
				continue
			}
			seen = append(seen, e.ok)
			if e.healthy == want {
				return seen
			}
		case <-timeout:
			t.Fatalf("backend %s: healthy=%v after results %v, want %v", id, h.backend(t, id).Healthy(), seen, want)
		}
	}
}

// switchable is a loopback listener that can be stopped and restarted on the
// same address, serving with serve.
type switchable struct {
	t     *testing.T
	addr  string
	serve func(net.Listener) (stop func())
	stop  func()
}

func newSwitchable(t *testing.T, serve func(net.Listener) (stop func())) *switchable {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &switchable{t: t, addr: l.Addr().String(), serve: serve}
	s.stop = serve(l)
	t.Cleanup(func() { s.Stop() })
	return s
}

func (s *switchable) Stop() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

func (s *switchable) Start() {
	s.t.Helper()
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.stop = s.serve(l)
}

func serveHTTP(h http.Handler) func(net.Listener) func() {
	return func(l net.Listener) func() {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		done := make(chan struct{})
		go func() { _ = srv.Serve(l); close(done) }()
		return func() { _ = srv.Close(); <-done }
	}
}

func serveTCP(l net.Listener) func() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return func() { _ = l.Close(); wg.Wait() }
}

var upgrader = websocket.Upgrader{}

func echoWS(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.WriteMessage(websocket.TextMessage, []byte("hello")) // a greeting before the pong
	for {
		// Reading lets gorilla answer pings with pongs.
		if _, _, err := c.ReadMessage(); err != nil {
			return
		}
	}
}

// TestRiseFall runs each probe type against a real server that is stopped
// and started again.
func TestRiseFall(t *testing.T) {
	t.Parallel() // each probe waits out the harness's interval
	tests := []struct {
		name  string
		opts  Options
		serve func(net.Listener) func()
	}{
		{"tcp", Options{Type: TypeTCP}, serveTCP},
		{"http", Options{Type: TypeHTTP, Path: "/healthz"}, serveHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				http.NotFound(w, r)
			}
		}))},
		{"websocket", Options{Type: TypeWebSocket, Path: "/ws"}, serveHTTP(http.HandlerFunc(echoWS))},
		{"websocket with ping", Options{Type: TypeWebSocket, Path: "/ws", Ping: true}, serveHTTP(http.HandlerFunc(echoWS))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newSwitchable(t, tt.serve)
			h := startChecker(t, tt.opts, balance.Member{ID: "a", Addr: srv.addr})
			// Healthy after the first passing probe.
			if seen := h.await(t, "a", true); len(seen) != 1 || !seen[0] {
				t.Errorf("results until healthy: got %v, want one pass", seen)
			}
			// Probes that ran before Stop (or Start) took effect may still
			// report the old outcome: the run that flips the health is the
			// tail, and nothing before it may have flipped it.
			srv.Stop()
			if seen := h.await(t, "a", false); !endsInRun(seen, false, 2) {
				t.Errorf("results until unhealthy: got %v, want passes then two failures (fall 2)", seen)
			}
			srv.Start()
			if seen := h.await(t, "a", true); !endsInRun(seen, true, 2) {
				t.Errorf("results until healthy again: got %v, want failures then two passes (rise 2)", seen)
			}
		})
	}
}

// endsInRun reports whether seen is results other than ok followed by
// exactly n results ok.
func endsInRun(seen []bool, ok bool, n int) bool {
	if len(seen) < n {
		return false
	}
	for i, r := range seen {
		if (r == ok) != (i >= len(seen)-n) {
			return false
		}
	}
	return true
}

// TestHTTPStatus flips the status a healthy server answers.
func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusNoContent)
	srv := newSwitchable(t, serveHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	})))
	h := startChecker(t, Options{Type: TypeHTTP, ExpectStatus: http.StatusNoContent}, balance.Member{ID: "a", Addr: srv.addr})
	h.await(t, "a", true)
	status.Store(http.StatusServiceUnavailable)
	h.await(t, "a", false)
	status.Store(http.StatusNoContent)
	h.await(t, "a", true)
}

// TestWebSocketProbeRejects checks servers that are not WebSocket backends.
func TestWebSocketProbeRejects(t *testing.T) {
	hijack := func(answer string, thenWait bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			answer = strings.ReplaceAll(answer, "ACCEPT", wswire.AcceptKey(r.Header.Get("Sec-WebSocket-Key")))
			_, _ = brw.WriteString(answer)
			_ = brw.Flush()
			if thenWait {
				_, _ = io.Copy(io.Discard, c) // never answers the ping
			}
		}
	}
	tests := []struct {
		name    string
		ping    bool
		handler http.Handler
		wantErr string
	}{
		{"plain 200", false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), "status 200"},
		{"wrong accept", false, hijack("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: bogus\r\n\r\n", false), "Sec-WebSocket-Accept"},
		{"no upgrade header", false, hijack("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ACCEPT\r\n\r\n", false), "Upgrade"},
		{"no pong", true, hijack("HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Accept: ACCEPT\r\n\r\n", true), "timeout"},
		{"close instead of pong", true, hijack("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Accept: ACCEPT\r\n\r\n\x88\x02\x03\xe8", true), "close"},
		{"masked server frame", true, hijack("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Accept: ACCEPT\r\n\r\n\x8a\x80\x00\x00\x00\x00", true), "masked"},
		{"upgrade accepted, case-insensitive tokens", false, hijack("HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\nConnection: keep-alive, UPGRADE\r\nSec-WebSocket-Accept: ACCEPT\r\n\r\n", false), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newSwitchable(t, serveHTTP(tt.handler))
			// Generous for the answers that come at once, on a slow machine;
			// short for the one case that must wait out the timeout.
			timeout := 2 * time.Second
			if tt.wantErr == "timeout" {
				timeout = 200 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Second)
			defer cancel()
			c, err := New(Options{Source: &balance.Pool{}, Type: TypeWebSocket, Ping: tt.ping})
			if err != nil {
				t.Fatal(err)
			}
			pctx, pcancel := context.WithTimeout(ctx, timeout)
			defer pcancel()
			err = c.prober.probe(pctx, srv.addr)
			if errors.Is(pctx.Err(), context.DeadlineExceeded) && err != nil {
				err = errors.New("timeout: " + err.Error())
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want success", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestNewBackendNeedsAPass: a backend the registry added is unavailable until
// a probe passed (fabio#393), and one that never passes stays out.
func TestNewBackendNeedsAPass(t *testing.T) {
	t.Parallel()
	live := newSwitchable(t, serveTCP)
	dead := newSwitchable(t, serveTCP)
	dead.Stop()
	h := startChecker(t, Options{Type: TypeTCP}, balance.Member{ID: "live", Addr: live.addr})
	h.await(t, "live", true)

	if err := h.pool.Update([]balance.Member{{ID: "live", Addr: live.addr}, {ID: "dead", Addr: dead.addr}}); err != nil {
		t.Fatal(err)
	}
	if seen := h.await(t, "dead", false); len(seen) != 1 || seen[0] {
		t.Errorf("dead: got results %v, want one failure", seen)
	}
	if !h.backend(t, "live").Healthy() {
		t.Errorf("live: got unhealthy after an update, want its state kept")
	}

	// Removed, then back: a new *Backend, probed again from scratch.
	if err := h.pool.Update([]balance.Member{{ID: "dead", Addr: dead.addr}}); err != nil {
		t.Fatal(err)
	}
	if err := h.pool.Update([]balance.Member{{ID: "dead", Addr: dead.addr}, {ID: "live", Addr: live.addr}}); err != nil {
		t.Fatal(err)
	}
	h.await(t, "live", true)
}

// TestThresholds drives record directly: exact rise/fall semantics.
func TestThresholds(t *testing.T) {
	c, err := New(Options{Source: &balance.Pool{}, Type: TypeTCP, Rise: 3, Fall: 2})
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := balance.NewPool(balance.PoolOptions{})
	_ = pool.Update([]balance.Member{{ID: "a", Addr: "127.0.0.1:1"}})
	b := pool.Snapshot().Backends[0]
	state := map[*balance.Backend]*target{}
	c.reconcile(state, pool.Snapshot(), time.Now())
	if b.Healthy() {
		t.Fatal("new backend: got healthy before any probe, want unhealthy")
	}
	fail := errors.New("refused")
	steps := []struct {
		err  error
		want bool
	}{
		{nil, true},   // first pass: in
		{fail, true},  // 1 of fall 2
		{nil, true},   // resets the run
		{fail, true},  // 1
		{fail, false}, // 2: out
		{nil, false},  // 1 of rise 3
		{nil, false},  // 2
		{fail, false}, // resets
		{nil, false},
		{nil, false},
		{nil, true}, // 3: in
	}
	for i, s := range steps {
		state[b].inFlight = true
		c.record(state, result{b: b, err: s.err}, time.Now())
		if got := b.Healthy(); got != s.want {
			t.Fatalf("step %d (err %v): got healthy=%v, want %v", i, s.err, got, s.want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	src := &balance.Pool{}
	tests := []struct {
		name string
		opts Options
	}{
		{"no source", Options{Type: TypeTCP}},
		{"no type", Options{Source: src}},
		{"unknown type", Options{Source: src, Type: "icmp"}},
		{"timeout above interval", Options{Source: src, Type: TypeTCP, Interval: time.Second, Timeout: 2 * time.Second}},
		{"relative path", Options{Source: src, Type: TypeHTTP, Path: "healthz"}},
		{"header injection", Options{Source: src, Type: TypeWebSocket, Host: "a\r\nX: y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts); err == nil {
				t.Errorf("got nil error, want one")
			}
		})
	}
}

func TestAcceptKey(t *testing.T) {
	// The example of RFC 6455 section 1.3.
	if got, want := wswire.AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

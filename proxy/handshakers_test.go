package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// hsServer is an http.Server over a handshakeListener, as cmd/edge runs
// one (ListenTLS), recording on which goroutine each handshake chose its
// certificate and what net/http logged.
type hsServer struct {
	ln    *handshakeListener
	addr  string
	roots *tls.Config // a client config trusting the server
	log   testkit.Buffer

	mu      sync.Mutex
	workers []bool // per handshake: did it run on a handshake worker?
}

func startHSServer(t *testing.T, max int32, handshakeTimeout time.Duration) *hsServer {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert := testkit.SelfSigned(t, "edge.test")
	h := &hsServer{addr: raw.Addr().String(), roots: testkit.ClientTLS(cert.Pool(), "edge.test")}
	tc := cert.TLS()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		buf := make([]byte, 64<<10)
		stack := string(buf[:runtime.Stack(buf, false)])
		h.mu.Lock()
		h.workers = append(h.workers, strings.Contains(stack, "(*handshakeListener).run"))
		h.mu.Unlock()
		return &tc, nil
	}}
	h.ln = newHandshakeListener(WrapListener(raw), cfg)
	h.ln.max = max
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || !r.TLS.HandshakeComplete {
				http.Error(w, "no TLS state", http.StatusInternalServerError)
				return
			}
			io.WriteString(w, "hello")
		}),
		ReadHeaderTimeout: handshakeTimeout,
		ErrorLog:          log.New(&h.log, "", 0),
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(h.ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return h
}

func (h *hsServer) onWorker() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bool(nil), h.workers...)
}

// get makes one HTTPS request on a connection of its own.
func (h *hsServer) get(t *testing.T) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: h.roots, DisableKeepAlives: true}}
	resp, err := c.Get("https://" + h.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello" {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
}

// TestHandshakeOnWorker: the TLS handshake of a connection runs on a
// long-lived handshake worker, and net/http serves the request with the
// handshake's state.
func TestHandshakeOnWorker(t *testing.T) {
	h := startHSServer(t, maxHandshakers, 5*time.Second)
	for range 3 {
		h.get(t)
	}
	if got := h.onWorker(); len(got) != 3 || !got[0] || !got[1] || !got[2] {
		t.Fatalf("handshakes on a worker: %v, want all three", got)
	}
}

// TestHandshakeWorkerKeepsNetHTTPsHandling: what net/http does with a
// handshake is unchanged when a worker runs it: a failed handshake is
// logged as net/http logs it (the handshake-failure metric reads that
// line), a client speaking plain HTTP gets net/http's 400, and a client
// that sends nothing is closed at net/http's handshake deadline.
func TestHandshakeWorkerKeepsNetHTTPsHandling(t *testing.T) {
	h := startHSServer(t, maxHandshakers, 300*time.Millisecond)

	c, err := tls.Dial("tcp", h.addr, &tls.Config{RootCAs: h.roots.RootCAs, ServerName: "edge.test", MaxVersion: tls.VersionTLS12})
	if err == nil {
		c.Close()
		t.Fatal("a TLS 1.2 handshake succeeded against a TLS 1.3 listener")
	}
	testkit.WaitFor(t, "net/http's log of the failed handshake", func() bool {
		return strings.Contains(h.log.String(), "http: TLS handshake error from 127.0.0.1:") &&
			strings.Contains(h.log.String(), "unsupported versions")
	})

	raw, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second)) // a hang fails the test instead of stalling it
	io.WriteString(raw, "GET / HTTP/1.1\r\nHost: edge.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
	if err != nil {
		t.Fatalf("plain HTTP to the TLS listener: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Client sent an HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP to the TLS listener: %d %q, want net/http's 400", resp.StatusCode, body)
	}

	silent, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !testkit.IsClosed(err) {
		t.Fatalf("a client that sends nothing: read %v, want the connection closed at the handshake deadline", err)
	}
}

// TestHandshakeWorkersBounded: once every worker holds a handshake (here
// the only one, held by a client that sends nothing), a new connection is
// handshaken by net/http's own goroutine, as without workers: stalled
// handshakes hold no one else's place.
func TestHandshakeWorkersBounded(t *testing.T) {
	h := startHSServer(t, 1, time.Minute)
	silent, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	testkit.WaitFor(t, "the worker holding the silent client's handshake", func() bool { return h.ln.live.Load() == 1 })
	h.get(t)
	if got := h.onWorker(); len(got) != 1 || got[0] {
		t.Fatalf("handshakes on a worker: %v, want one, on net/http's goroutine", got)
	}
	if n := h.ln.live.Load(); n != 1 {
		t.Fatalf("%d workers, want at most the bound, 1", n)
	}
}

// TestHandshakeWorkersEndWithClose: the workers are the listener's and
// end with it, the one holding a handshake once that handshake is over.
func TestHandshakeWorkersEndWithClose(t *testing.T) {
	h := startHSServer(t, maxHandshakers, time.Minute)
	silent, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "a worker holding the silent client's handshake", func() bool { return h.ln.live.Load() == 1 })
	h.get(t) // on a second worker, idle once it is done
	if n := h.ln.live.Load(); n != 2 {
		t.Fatalf("%d workers, want 2", n)
	}
	h.ln.Close()
	testkit.WaitFor(t, "the idle worker to end", func() bool { return h.ln.live.Load() == 1 })
	silent.Close()
	testkit.WaitFor(t, "the busy worker to end with its handshake", func() bool { return h.ln.live.Load() == 0 })
}

// TestHandshakeWorkerPanicContained: a panic in a handshake (a
// certificate callback, on a client's SNI) ends that connection alone, as
// net/http's recovery does on its own goroutine: the process goes on, and
// the next client's handshake succeeds.
func TestHandshakeWorkerPanicContained(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert := testkit.SelfSigned(t, "edge.test")
	tc := cert.TLS()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if hi.ServerName == "boom.test" {
			panic("a certificate callback's bug")
		}
		return &tc, nil
	}}
	ln := newHandshakeListener(WrapListener(raw), cfg)
	var logged testkit.Buffer
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(&logged, "", 0),
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })

	c, err := tls.Dial("tcp", raw.Addr().String(), &tls.Config{ServerName: "boom.test", InsecureSkipVerify: true})
	if err == nil {
		c.Close()
		t.Fatal("a handshake whose certificate callback panicked succeeded")
	}
	roots := testkit.ClientTLS(cert.Pool(), "edge.test")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: roots, DisableKeepAlives: true}}
	resp, err := hc.Get("https://" + raw.Addr().String() + "/")
	if err != nil {
		t.Fatalf("the next client: %v", err)
	}
	resp.Body.Close()
}

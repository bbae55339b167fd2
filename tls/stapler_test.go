package tls_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	edgetls "github.com/edgelb/edge/tls"
)

// stallingResponder is a loopback HTTP OCSP responder that forwards every
// request to a real `openssl ocsp` and can hold one request before
// forwarding it. The hold is the only thing it adds: openssl ocsp cannot be
// told to hang on demand, and a responder that stalls is what the tests
// need. The answers are openssl's.
type stallingResponder struct {
	url     string
	armed   atomic.Bool   // the next request stalls
	stalled chan struct{} // closed when the held request arrives
	release chan struct{} // closed by the test to let it through
	// selfReleased is closed when the held request was let through by the
	// bound below rather than by the test: whatever waited on the lock
	// writers hold then only returned because the responder answered.
	selfReleased chan struct{}
	once         sync.Once
}

// stallBound lets a held request through by itself, so that a regression
// fails the test instead of hanging it.
const stallBound = 10 * time.Second

// patientOCSP outwaits stallBound, so that only the test or the bound ends
// a held request, never the request timeout.
var patientOCSP = edgetls.OCSPOptions{Timeout: 3 * stallBound}

func startStallingResponder(t *testing.T, opensslPort int) *stallingResponder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stallingResponder{
		url:          "http://" + ln.Addr().String(),
		stalled:      make(chan struct{}),
		release:      make(chan struct{}),
		selfReleased: make(chan struct{}),
	}
	upstream := fmt.Sprintf("http://127.0.0.1:%d", opensslPort)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if s.armed.CompareAndSwap(true, false) {
			close(s.stalled)
			select {
			case <-s.release:
			case <-time.After(stallBound):
				close(s.selfReleased)
			}
		}
		res, err := client.Post(upstream, "application/ocsp-request", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
		w.WriteHeader(res.StatusCode)
		io.Copy(w, res.Body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() {
		s.letGo()
		srv.Close()
	})
	return s
}

func (s *stallingResponder) letGo() { s.once.Do(func() { close(s.release) }) }

// holdNext makes the next request stall and returns a wait for its arrival.
func (s *stallingResponder) holdNext(t *testing.T) func() {
	s.armed.Store(true)
	return func() {
		t.Helper()
		select {
		case <-s.stalled:
		case <-time.After(stallBound):
			t.Fatal("the OCSP refresh never reached the responder")
		}
	}
}

// refreshInBackground runs a forced OCSP refresh and returns a channel
// closed when it has returned.
func refreshInBackground(term *edgetls.Terminator) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		term.RefreshOCSP(context.Background())
	}()
	return done
}

// reloadBeforeRelease calls Reload while the responder holds a request and
// fails unless Reload returns before the request is let through.
func reloadBeforeRelease(t *testing.T, term *edgetls.Terminator, s *stallingResponder) {
	t.Helper()
	reloaded := make(chan error, 1)
	go func() { reloaded <- term.Reload() }()
	select {
	case err := <-reloaded:
		if err != nil {
			t.Fatalf("Reload: %v", err)
		}
	case <-s.selfReleased:
		t.Fatal("Reload returned only after the stalled OCSP responder answered: it waits behind the OCSP request")
	}
}

// TestReloadWhileOCSPResponderStalls: an OCSP refresh stuck at a responder
// does not hold up Reload (SIGHUP): the request runs outside the lock that
// Reload takes, and its staple is published once the responder answers.
func TestReloadWhileOCSPResponderStalls(t *testing.T) {
	needOpenSSL(t)
	p := newPKI(t)
	port := freePort(t)
	resp := startStallingResponder(t, port)
	a := p.leaf(t, leafOpts{file: "a", names: []string{"a.example.com"}, ocspURL: resp.url})
	b := p.leaf(t, leafOpts{file: "b", names: []string{"b.example.com"}})
	b2 := p.leaf(t, leafOpts{file: "b2", names: []string{"b.example.com"}})
	startResponder(t, p, port, indexLine(a.cert, time.Time{}), "", "")
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{a.files(), b.files()}, OCSP: patientOCSP})
	e.obs.wait(t, "ocsp a.pem good")

	arrived := resp.holdNext(t)
	refreshed := refreshInBackground(e.term)
	arrived()

	b2.installAt(t, b)
	reloadBeforeRelease(t, e.term, resp)
	cs := mustDial(t, e.addr, p.client("b.example.com"))
	if got, want := cs.PeerCertificates[0].SerialNumber, b2.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("after Reload during the stall: serial %s, want the new %s", got, want)
	}
	// The previous staple keeps being served while the refresh waits.
	if got, want := stapleStatus(t, mustDial(t, e.addr, p.client("a.example.com")), a, p), "good"; got != want {
		t.Errorf("during the stall: staple %s, want %s", got, want)
	}

	resp.letGo()
	<-refreshed
	e.obs.wait(t, "ocsp a.pem good")
	if got, want := stapleStatus(t, mustDial(t, e.addr, p.client("a.example.com")), a, p), "good"; got != want {
		t.Errorf("after the responder answered: staple %s, want %s", got, want)
	}
	if st := e.term.Status().Certificates[0].OCSP; st.State != "good" || !st.Stapled || st.LastError != "" {
		t.Errorf("status: got %+v, want a good staple", st)
	}
}

// TestStalledAnswerForReplacedCertificateDropped: an answer that arrives
// after its certificate was replaced is not applied to the new one: the
// new certificate keeps the staple it was loaded with.
func TestStalledAnswerForReplacedCertificateDropped(t *testing.T) {
	needOpenSSL(t)
	p := newPKI(t)
	port := freePort(t)
	resp := startStallingResponder(t, port)
	a := p.leaf(t, leafOpts{file: "a", names: []string{"a.example.com"}, ocspURL: resp.url})
	a2 := p.leaf(t, leafOpts{file: "a2", names: []string{"a.example.com"}, ocspURL: resp.url})
	startResponder(t, p, port, indexLine(a.cert, time.Time{})+indexLine(a2.cert, time.Time{}), "", "")
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{a.files()}, OCSP: patientOCSP})
	e.obs.wait(t, "ocsp a.pem good")

	arrived := resp.holdNext(t)
	refreshed := refreshInBackground(e.term)
	arrived()

	// The new pair is stapled by Reload itself (its request is not held).
	a2.installAt(t, a)
	reloadBeforeRelease(t, e.term, resp)
	resp.letGo()
	<-refreshed

	cs := mustDial(t, e.addr, p.client("a.example.com"))
	if got, want := cs.PeerCertificates[0].SerialNumber, a2.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Fatalf("serial %s, want the new %s", got, want)
	}
	// stapleStatus fails the test when the staple is for another serial.
	if got, want := stapleStatus(t, cs, a2, p), "good"; got != want {
		t.Errorf("staple of the new certificate: %s, want %s", got, want)
	}
	want := []string{"ocsp a.pem good", "ocsp a.pem good", "reload a.pem err=false"}
	if got := e.obs.all(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events: got %q, want %q (nothing for the answer about the replaced certificate)", got, want)
	}
}

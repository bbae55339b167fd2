package tls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	edgetls "github.com/edgelb/edge/tls"
)

// One expired certificate among several does not stop the others: HAProxy
// and nginx start and serve them, and so does edge. The expired one is
// logged, shown in Status and reported by Check as a warning; New fails
// only when no certificate is usable at all.
func TestExpiredCertificateAmongOthers(t *testing.T) {
	p := newPKI(t)
	good := p.leaf(t, leafOpts{names: []string{"good.example.com"}})
	expired := p.leaf(t, leafOpts{names: []string{"expired.example.com"}, notBefore: time.Now().Add(-48 * time.Hour), notAfter: time.Now().Add(-24 * time.Hour)})
	opts := edgetls.Options{Certificates: []edgetls.CertFiles{expired.files(), good.files()}, OCSP: edgetls.OCSPOptions{Disabled: true}}

	res := edgetls.Check(opts)
	if len(res.Errors) != 0 || len(res.Warnings) != 1 || res.Warnings[0].Cert != 0 || !strings.Contains(res.Warnings[0].Err.Error(), "expired at") {
		t.Fatalf("Check: got %+v, want one warning for certificate 0 (expired)", res)
	}

	e := start(t, opts)
	out := sClient(t, e.addr, "-servername", "good.example.com")
	if !strings.Contains(out, "CN = good.example.com") || !strings.Contains(out, "Cipher is") {
		t.Errorf("openssl s_client for the good name did not get its certificate:\n%s", out)
	}
	// Clients without SNI, or naming the expired one, get the usable default.
	if got := mustDial(t, e.addr, p.client("good.example.com")).PeerCertificates[0].Subject.CommonName; got != "good.example.com" {
		t.Errorf("served %s, want good.example.com", got)
	}
	st := e.term.Status().Certificates
	if len(st) != 2 || st[0].Served || st[0].Usable || !strings.Contains(st[0].LastError, "expired at") || !st[1].Served || !st[1].Usable {
		t.Errorf("status: got %+v, want the expired pair unusable and unserved, the good one served", st)
	}
	if n := e.logs.count("certificate not usable, not served"); n != 1 {
		t.Errorf("logged the unusable certificate %d times, want 1", n)
	}

	// Replacing the expired files with a good pair serves it without restart.
	fresh := p.leaf(t, leafOpts{file: "fresh", names: []string{"expired.example.com"}})
	fresh.installAt(t, expired)
	if err := e.term.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if st := e.term.Status().Certificates[0]; !st.Usable || !st.Served || st.LastError != "" {
		t.Errorf("status after replacement: got %+v, want served", st)
	}
	if got := mustDial(t, e.addr, p.client("expired.example.com")).PeerCertificates[0].SerialNumber; got.Cmp(fresh.cert.SerialNumber) != 0 {
		t.Errorf("served serial %x, want the fresh %x", got, fresh.cert.SerialNumber)
	}
}

// A certificate not yet valid is served once its NotBefore passes, with no
// reload.
func TestNotYetValidCertificateStartsServing(t *testing.T) {
	p := newPKI(t)
	good := p.leaf(t, leafOpts{names: []string{"good.example.com"}})
	future := p.leaf(t, leafOpts{names: []string{"future.example.com"}, notBefore: time.Now().Add(time.Hour)})
	clk := newClock()
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{good.files(), future.files()}, OCSP: edgetls.OCSPOptions{Disabled: true}, Now: clk.Now})
	if st := e.term.Status().Certificates[1]; st.Usable || !strings.Contains(st.LastError, "not yet valid") {
		t.Fatalf("status: got %+v, want not yet valid", st)
	}
	clk.Advance(2 * time.Hour)
	e.term.PollFiles(context.Background())
	if st := e.term.Status().Certificates[1]; !st.Usable || !st.Served {
		t.Fatalf("status after NotBefore: got %+v, want served", st)
	}
	cfg := p.client("future.example.com")
	cfg.Time = clk.Now
	if got := mustDial(t, e.addr, cfg).PeerCertificates[0].Subject.CommonName; got != "future.example.com" {
		t.Errorf("served %s, want future.example.com", got)
	}
}

// With no usable certificate at all, New and Check fail, naming each file.
func TestNoUsableCertificate(t *testing.T) {
	p := newPKI(t)
	expired := p.leaf(t, leafOpts{names: []string{"expired.example.com"}, notBefore: time.Now().Add(-48 * time.Hour), notAfter: time.Now().Add(-24 * time.Hour)})
	future := p.leaf(t, leafOpts{names: []string{"future.example.com"}, notBefore: time.Now().Add(24 * time.Hour)})
	opts := edgetls.Options{Certificates: []edgetls.CertFiles{expired.files(), future.files()}, Logger: discardLogger()}
	for _, w := range []string{expired.certFile, "expired at", future.certFile, "not yet valid", "no usable certificate"} {
		if _, err := edgetls.New(opts); err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("New: got %v, want an error mentioning %q", err, w)
		}
	}
	if res := edgetls.Check(opts); len(res.Errors) == 0 {
		t.Errorf("Check: got %+v, want errors", res)
	}
}

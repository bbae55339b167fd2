package tls_test

import (
	"crypto/tls"
	"strings"
	"testing"

	edgetls "github.com/edgelb/edge/tls"
)

// TestCurves checks the key exchanges a listener offers, as openssl
// s_client (OpenSSL 3.0, which has no ML-KEM) and a Go client see them:
// by default the hybrid X25519MLKEM768 that browsers send is chosen when
// offered, and X25519 for OpenSSL; a listener limited to P-256 refuses a
// client that offers only X25519.
func TestCurves(t *testing.T) {
	p := newPKI(t)
	leaf := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	off := edgetls.OCSPOptions{Disabled: true}

	def := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{leaf.files()}, OCSP: off})
	cs := mustDial(t, def.addr, &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true})
	if cs.CurveID != tls.X25519MLKEM768 {
		t.Errorf("default listener, Go client with its defaults: key exchange %v, want X25519MLKEM768", cs.CurveID)
	}
	out := sClient(t, def.addr, "-servername", "a.example.com", "-groups", "X25519:P-256")
	if !strings.Contains(out, "Server Temp Key: X25519") {
		t.Errorf("default listener, openssl offering X25519:P-256: want X25519 chosen:\n%s", out)
	}

	p256 := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{leaf.files()}, OCSP: off, Curves: []tls.CurveID{tls.CurveP256}})
	out = sClient(t, p256.addr, "-servername", "a.example.com", "-groups", "X25519:P-256")
	if !strings.Contains(out, "Server Temp Key: ECDH, prime256v1") {
		t.Errorf("listener with curves [P-256], openssl offering X25519:P-256: want P-256 chosen:\n%s", out)
	}
	out = sClient(t, p256.addr, "-servername", "a.example.com", "-groups", "X25519")
	if strings.Contains(out, "Server Temp Key") || !strings.Contains(out, "alert") {
		t.Errorf("listener with curves [P-256], openssl offering X25519 alone: want a refused handshake:\n%s", out)
	}
	cs = mustDial(t, p256.addr, &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true})
	if cs.CurveID != tls.CurveP256 {
		t.Errorf("listener with curves [P-256], Go client with its defaults: key exchange %v, want P-256", cs.CurveID)
	}
}

// TestCurvesNoneNegotiable: a listener whose curves this process cannot
// use at all (only the hybrid, with GODEBUG=tlsmlkem=0) is refused by
// Check (edge -check) and New (edge's start and reload), rather than
// failing every handshake.
func TestCurvesNoneNegotiable(t *testing.T) {
	p := newPKI(t)
	leaf := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	o := edgetls.Options{Certificates: []edgetls.CertFiles{leaf.files()}, OCSP: edgetls.OCSPOptions{Disabled: true}, Curves: []tls.CurveID{tls.X25519MLKEM768}}
	if err := edgetls.Check(o).Err(); err != nil {
		t.Fatalf("curves [X25519MLKEM768] with Go's defaults: %v", err)
	}
	t.Setenv("GODEBUG", "tlsmlkem=0")
	err := edgetls.Check(o).Err()
	if err == nil || !strings.Contains(err.Error(), "none can be negotiated") {
		t.Fatalf("curves [X25519MLKEM768] under GODEBUG=tlsmlkem=0: Check = %v, want the curves refused", err)
	}
	if _, err := edgetls.New(o); err == nil || !strings.Contains(err.Error(), "none can be negotiated") {
		t.Fatalf("curves [X25519MLKEM768] under GODEBUG=tlsmlkem=0: New = %v, want the curves refused", err)
	}
	o.Curves = []tls.CurveID{tls.X25519MLKEM768, tls.X25519}
	if err := edgetls.Check(o).Err(); err != nil {
		t.Errorf("curves [X25519MLKEM768 X25519] under GODEBUG=tlsmlkem=0: %v, want X25519 to do", err)
	}
}

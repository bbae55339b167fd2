package tls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// Finding is one problem with the options of a Terminator.
type Finding struct {
	// Cert is the index in Options.Certificates of the pair concerned, or
	// -1 for another setting.
	Cert int
	// Err says what is wrong and names the file.
	Err error
}

// CheckResult is what Check found.
type CheckResult struct {
	// Errors make New fail.
	Errors []Finding
	// Warnings are pairs that New leaves out and serves around: a
	// certificate expired or not yet valid while another one is usable.
	Warnings []Finding
}

// Err joins the errors, nil when there are none.
func (r CheckResult) Err() error {
	errs := make([]error, len(r.Errors))
	for i, f := range r.Errors {
		errs[i] = f.Err
	}
	return errors.Join(errs...)
}

// Check runs every check New runs on o, without serving, fetching OCSP
// responses or issuers, nor asking a ticket key source: the options, every
// certificate pair (files readable, PEM, key matching the leaf, chain order,
// issuer file, dates, must-staple policy), the client CA file and the ticket
// key file. `edge -check` and edge's startup both call it, so a file that
// passes the check does not fail at start for a reason found here.
func Check(o Options) CheckResult {
	o, err := o.withDefaults()
	if err != nil {
		return CheckResult{Errors: []Finding{{Cert: -1, Err: err}}}
	}
	_, res := loadEntries(o, o.Now())
	if o.ClientCAFile != "" {
		if _, err := clientCAs(o.ClientCAFile); err != nil {
			res.Errors = append(res.Errors, Finding{Cert: -1, Err: err})
		}
	}
	if len(o.Curves) > 0 {
		if err := negotiable(o.Curves); err != nil {
			res.Errors = append(res.Errors, Finding{Cert: -1, Err: err})
		}
	}
	if !o.Tickets.Disabled && o.Tickets.KeyFile != "" {
		to := o.Tickets
		to.Source = nil
		if _, err := newTicketKeys(to, o.Now); err != nil {
			res.Errors = append(res.Errors, Finding{Cert: -1, Err: fmt.Errorf("session tickets: %w", err)})
		}
	}
	return res
}

// clientCAs reads the client CA file.
func clientCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("client CA file %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA file %s: no PEM certificate found", file)
	}
	return pool, nil
}

// staplePolicy refuses a must-staple pair that policy "refuse" could never
// serve.
func staplePolicy(o Options, lc *loadedCert) error {
	if !lc.mustStaple || o.OCSP.MustStaple != MustStapleRefuse {
		return nil
	}
	switch {
	case o.OCSP.Disabled:
		return fmt.Errorf("certificate file %s: must-staple certificate while OCSP stapling is disabled: it would never be served (must-staple policy %q)", lc.files.CertFile, MustStapleRefuse)
	case len(ocspResponders(lc.leaf)) == 0:
		return fmt.Errorf("certificate file %s: must-staple certificate names no OCSP responder: it would never be served (must-staple policy %q)", lc.files.CertFile, MustStapleRefuse)
	case lc.issuer == nil && len(lc.caIssuers) == 0:
		return fmt.Errorf("certificate file %s: must-staple certificate without its issuer (not in the chain, no issuer_file, no http(s) caIssuers URL): OCSP responses cannot be verified", lc.files.CertFile)
	}
	return nil
}

// negotiable handshakes in memory between a server and a client both
// limited to curves: Go only filters its own list by them, so a list this
// process cannot use at all (only hybrids under GODEBUG=tlsmlkem=0, X25519
// alone in FIPS 140 mode) would fail every handshake of the listener.
func negotiable(curves []tls.CurveID) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("curves: a key for the check: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"check.invalid"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("curves: a certificate for the check: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	s, c := net.Pipe()
	defer s.Close()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: curves})
	go func() {
		_ = srv.HandshakeContext(ctx)
		s.Close()
	}()
	cli := tls.Client(c, &tls.Config{InsecureSkipVerify: true, CurvePreferences: curves}) //nolint:gosec // both ends are this check's own
	if err := cli.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("curves %v: none can be negotiated by this process (GODEBUG tlsmlkem=0 or tlssecpmlkem=0, or FIPS 140 mode, turn some off): %w", curves, err)
	}
	return nil
}

package tls

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"time"
)

// maxIssuerDoc bounds what is read from a caIssuers URL: a CA certificate
// is a few kilobytes.
const maxIssuerDoc = 64 << 10

// issuerFromFile returns the certificate of the issuer file that signed
// leaf. The file may be a bundle (nginx's ssl_trusted_certificate often is).
func issuerFromFile(f CertFiles, data []byte, leaf *x509.Certificate) (*x509.Certificate, error) {
	certs, err := parsePEMCerts(data)
	if err != nil {
		return nil, fmt.Errorf("issuer file %s: %w", f.IssuerFile, err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("issuer file %s: no CERTIFICATE PEM block found", f.IssuerFile)
	}
	if c := signerOf(leaf, certs); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("issuer file %s did not sign certificate file %s: none of its %d certificates (first %s) holds the key of the leaf's issuer %s",
		f.IssuerFile, f.CertFile, len(certs), certs[0].Subject, leaf.Issuer)
}

// signerOf returns the first of certs whose key signed leaf, or nil.
func signerOf(leaf *x509.Certificate, certs []*x509.Certificate) *x509.Certificate {
	for _, c := range certs {
		if leaf.CheckSignatureFrom(c) == nil {
			return c
		}
	}
	return nil
}

// caIssuerURLs returns the leaf's caIssuers URLs that can be fetched: http
// and https only (an ldap:// URL, also allowed by RFC 5280, is skipped).
func caIssuerURLs(leaf *x509.Certificate) []string {
	var out []string
	for _, u := range leaf.IssuingCertificateURL {
		if p, err := url.Parse(u); err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Host != "" {
			out = append(out, u)
		}
	}
	return out
}

// parseIssuerDoc reads what a caIssuers URL serves: one DER certificate
// (RFC 5280 section 4.2.2.1, "application/pkix-cert"), or PEM certificates,
// which some CAs serve. A PKCS#7 "certs-only" bundle is not understood.
func parseIssuerDoc(body []byte) ([]*x509.Certificate, error) {
	if c, err := x509.ParseCertificate(body); err == nil {
		return []*x509.Certificate{c}, nil
	}
	certs, err := parsePEMCerts(body)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate found (want DER or PEM; PKCS#7 is not supported)")
	}
	return certs, nil
}

// fetchIssuer gets the issuer of lc from its caIssuers URLs, each request
// bounded by timeout and maxIssuerDoc, and keeps only a certificate that
// signed the leaf: the URL is not trusted, the signature is.
func fetchIssuer(ctx context.Context, client *http.Client, timeout time.Duration, lc *loadedCert) (*x509.Certificate, error) {
	var errs []error
	for _, u := range lc.caIssuers {
		body, err := getBounded(ctx, client, timeout, u)
		var certs []*x509.Certificate
		if err == nil {
			certs, err = parseIssuerDoc(body)
		}
		if err == nil {
			if c := signerOf(lc.leaf, certs); c != nil {
				return c, nil
			}
			err = fmt.Errorf("the certificate served (%s) did not sign the leaf (issued by %s)", certs[0].Subject, lc.leaf.Issuer)
		}
		errs = append(errs, fmt.Errorf("caIssuers %s: %w", u, err))
	}
	return nil, errors.Join(errs...)
}

func getBounded(ctx context.Context, client *http.Client, timeout time.Duration, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s", res.Status)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxIssuerDoc+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxIssuerDoc {
		return nil, fmt.Errorf("document larger than %d bytes", maxIssuerDoc)
	}
	return body, nil
}

// issuerFile is where a fetched issuer of lc is kept, or "" without a
// StateDir, so that a restart verifies its persisted staple at once.
func issuerFile(dir string, lc *loadedCert) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "issuer-"+lc.id+".der")
}

// loadIssuer reads a persisted issuer of lc, trusted only if the file is
// edge's (readStateFile) and the certificate signed the leaf.
func loadIssuer(path string, lc *loadedCert) *x509.Certificate {
	if path == "" {
		return nil
	}
	raw, err := readStateFile(path)
	if err != nil {
		return nil
	}
	c, err := x509.ParseCertificate(raw)
	if err != nil || lc.leaf.CheckSignatureFrom(c) != nil {
		return nil
	}
	return c
}

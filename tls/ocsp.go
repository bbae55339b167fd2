package tls

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgelb/edge/internal/trust"
	"golang.org/x/crypto/ocsp"
)

// Refresh bounds: a staple is refreshed at about half its validity, never
// sooner than minRefresh (unless it would expire first) nor later than
// maxRefresh, so a responder's change of mind is picked up within hours.
const (
	minRefresh = time.Minute
	maxRefresh = 12 * time.Hour
	// noNextUpdateValidity is how long a response without NextUpdate
	// ("newer information is always available", RFC 6960 section 2.4) is
	// served.
	noNextUpdateValidity = 24 * time.Hour
	// clockSkew is tolerated on ThisUpdate.
	clockSkew = 5 * time.Minute
	// maxBackoff caps the retry delay after failures.
	maxBackoff = time.Hour
	// maxOCSPResponse bounds what is read from a responder.
	maxOCSPResponse = 1 << 20
)

// staple is one verified, good OCSP response.
type staple struct {
	raw        []byte
	thisUpdate time.Time
	nextUpdate time.Time // zero when the responder gave none
}

// expires is when the staple must stop being served.
func (s *staple) expires() time.Time {
	if s.nextUpdate.IsZero() {
		return s.thisUpdate.Add(noNextUpdateValidity)
	}
	return s.nextUpdate
}

// refreshAt is when to ask again: half-way through the validity, bounded.
func (s *staple) refreshAt(now time.Time) time.Time {
	exp := s.expires()
	at := s.thisUpdate.Add(exp.Sub(s.thisUpdate) / 2)
	lo := minRefresh
	if left := exp.Sub(now) / 2; left < lo {
		lo = max(left, 5*time.Second)
	}
	if at.Before(now.Add(lo)) {
		at = now.Add(lo)
	}
	if at.After(now.Add(maxRefresh)) {
		at = now.Add(maxRefresh)
	}
	return at
}

// backoff is the delay before retry number n (n >= 1): exponential from one
// minute, capped, with +-25% jitter so a fleet does not retry in step.
func backoff(n int) time.Duration {
	d := minRefresh << min(n-1, 10)
	d = min(d, maxBackoff)
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// ocspResponders returns the leaf's http(s) responder URLs.
func ocspResponders(leaf *x509.Certificate) []string {
	var out []string
	for _, u := range leaf.OCSPServer {
		if p, err := url.Parse(u); err == nil && (p.Scheme == "http" || p.Scheme == "https") {
			out = append(out, u)
		}
	}
	return out
}

// fetchOCSP asks each responder of lc (issued by issuer) in turn and returns the first verified
// answer, whatever its status.
func fetchOCSP(ctx context.Context, client *http.Client, timeout time.Duration, lc *loadedCert, issuer *x509.Certificate, now time.Time) ([]byte, *ocsp.Response, error) {
	req, err := ocsp.CreateRequest(lc.leaf, issuer, &ocsp.RequestOptions{Hash: crypto.SHA1})
	if err != nil {
		return nil, nil, fmt.Errorf("OCSP request: %w", err)
	}
	var errs []error
	for _, u := range ocspResponders(lc.leaf) {
		raw, err := postOCSP(ctx, client, timeout, u, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("OCSP responder %s: %w", u, err))
			continue
		}
		resp, err := verifyOCSP(raw, lc.leaf, issuer, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("OCSP responder %s: %w", u, err))
			continue
		}
		return raw, resp, nil
	}
	return nil, nil, errors.Join(errs...)
}

// postOCSP sends req by POST (RFC 6960 appendix A.1).
func postOCSP(ctx context.Context, client *http.Client, timeout time.Duration, u string, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(req))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/ocsp-request")
	hr.Header.Set("Accept", "application/ocsp-response")
	res, err := client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s", res.Status)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxOCSPResponse+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxOCSPResponse {
		return nil, fmt.Errorf("response larger than %d bytes", maxOCSPResponse)
	}
	return body, nil
}

// verifyOCSP checks that raw answers for leaf, is signed by issuer or by a
// responder issuer delegated with the OCSPSigning EKU (RFC 6960 section
// 4.2.2.2), and is current at now. It does not judge the status.
//
// ocsp.ParseResponseForCert(raw, leaf, issuer) is not used as is: it does
// not check the delegate's EKU nor its validity, and it rejects a response
// that embeds the (intermediate) issuer itself, because it then checks the
// issuer's signature on its own certificate.
func verifyOCSP(raw []byte, leaf, issuer *x509.Certificate, now time.Time) (*ocsp.Response, error) {
	if issuer == nil {
		return nil, errors.New("issuer certificate unknown")
	}
	// With a nil issuer this checks the serial and, when a certificate is
	// embedded, the response's signature by it.
	resp, err := ocsp.ParseResponseForCert(raw, leaf, nil)
	if err != nil {
		return nil, fmt.Errorf("parse OCSP response: %w", err)
	}
	switch {
	case resp.Certificate == nil || resp.Certificate.Equal(issuer):
		if err := resp.CheckSignatureFrom(issuer); err != nil {
			return nil, fmt.Errorf("OCSP response not signed by the issuer %s: %w", issuer.Subject, err)
		}
	default:
		d := resp.Certificate
		if err := d.CheckSignatureFrom(issuer); err != nil {
			return nil, fmt.Errorf("OCSP responder certificate %s not issued by %s: %w", d.Subject, issuer.Subject, err)
		}
		if !slices.Contains(d.ExtKeyUsage, x509.ExtKeyUsageOCSPSigning) {
			return nil, fmt.Errorf("OCSP responder certificate %s lacks the OCSPSigning extended key usage", d.Subject)
		}
		if now.Before(d.NotBefore) || now.After(d.NotAfter) {
			return nil, fmt.Errorf("OCSP responder certificate %s not valid now", d.Subject)
		}
	}
	if resp.SerialNumber == nil || resp.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		return nil, errors.New("OCSP response is for another serial number")
	}
	if resp.ThisUpdate.After(now.Add(clockSkew)) {
		return nil, fmt.Errorf("OCSP response ThisUpdate %s is in the future", resp.ThisUpdate.UTC().Format(time.RFC3339))
	}
	exp := (&staple{thisUpdate: resp.ThisUpdate, nextUpdate: resp.NextUpdate}).expires()
	if !now.Before(exp) {
		return nil, fmt.Errorf("OCSP response expired at %s", exp.UTC().Format(time.RFC3339))
	}
	return resp, nil
}

// stapleFile is where the staple of lc is kept, or "" without a StateDir.
func stapleFile(dir string, lc *loadedCert) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "ocsp-"+lc.id+".der")
}

// saveStaple writes raw to path in state_dir (internal/trust): into a
// directory of edge's, through a new 0600 file renamed into place, so a
// reader never sees half a staple and a link planted at path is replaced,
// never written through.
func saveStaple(path string, raw []byte) error {
	return trust.WriteFile(path, raw)
}

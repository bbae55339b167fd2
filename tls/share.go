package tls

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"
)

// StapleShare keeps OCSP responses where every edge of a fleet reads them
// (cmd/edge gives a Consul KV store, fleet.Staples), so that a fleet
// of N edges asks the responder once per refresh instead of N times, and
// an edge that starts staples from its first handshake what another one
// fetched. Responses read from it are verified like the responder's own
// (signature, certificate, time), so whoever can write the store can at
// worst hold back a fresh response, never make an edge staple a forged or
// foreign one.
type StapleShare interface {
	// Staple returns the stored response of the certificate id (nil when
	// there is none) and the store's index. With waitIndex > 0 it waits up
	// to wait for a change after that index first.
	Staple(ctx context.Context, id string, waitIndex uint64, wait time.Duration) (raw []byte, index uint64, err error)
	// Lock takes the fleet's lock on asking the responder about id, without
	// waiting: held is false when another edge holds it. unlock releases
	// it; the lock also lapses by itself if this edge dies holding it.
	Lock(ctx context.Context, id string) (unlock func(), held bool, err error)
	// Store stores raw as the response of id.
	Store(ctx context.Context, id string, raw []byte) error
}

// maxSharedStaple bounds a response read from the share; real ones are a
// few KiB.
const maxSharedStaple = 64 << 10

// askFleet asks the share first: a stored response still in the first
// half of its validity (when edge itself would not refresh yet) is
// stapled as it is. Missing or stale, the edge holding the lock asks the
// responder and stores the answer; an edge that finds the lock taken waits
// a bounded time for that answer. ok is false when the share cannot help
// (unreachable, or nothing usable came in time): the caller then asks the
// responder itself, as without a share.
func (s *stapler) askFleet(ctx context.Context, lc *loadedCert, issuer *x509.Certificate, now time.Time) (ocspResult, bool) {
	sh := s.opts.Share
	raw, index, err := sh.Staple(ctx, lc.id, 0, 0)
	if err != nil {
		s.log.Warn("shared OCSP staples unreachable; asking the responder", "cert", lc.files.CertFile, "err", err)
		return ocspResult{}, false
	}
	if r, ok := s.shared(raw, lc, issuer, now); ok {
		return r, true
	}
	unlock, held, err := sh.Lock(ctx, lc.id)
	if err != nil {
		s.log.Warn("shared OCSP staples: lock failed; asking the responder", "cert", lc.files.CertFile, "err", err)
		return ocspResult{}, false
	}
	if !held {
		// Another edge is asking: its answer arrives within its own
		// responder timeout, or never (it died): then ask ourselves.
		// A blocking read can return on another change under the prefix
		// (the lock itself): wait again until the bound.
		// Real time, not s.now: this bounds a network wait.
		deadline := time.Now().Add(2 * s.opts.Timeout)
		for left := 2 * s.opts.Timeout; left > 0; left = time.Until(deadline) {
			raw, index, err = sh.Staple(ctx, lc.id, index, left)
			if err != nil {
				break
			}
			if r, ok := s.shared(raw, lc, issuer, now); ok {
				return r, true
			}
		}
		return ocspResult{}, false
	}
	defer unlock()
	// Another edge may have stored a fresh answer between the read and the
	// lock: ask the responder only if the store still has none.
	if raw, _, err := sh.Staple(ctx, lc.id, 0, 0); err == nil {
		if r, ok := s.shared(raw, lc, issuer, now); ok {
			return r, true
		}
	}
	raw, resp, err := fetchOCSP(ctx, s.opts.HTTPClient, s.opts.Timeout, lc, issuer, now)
	if err == nil {
		if serr := sh.Store(ctx, lc.id, raw); serr != nil {
			s.log.Warn("shared OCSP staples: store failed; the other edges ask the responder themselves", "cert", lc.files.CertFile, "err", serr)
		}
	}
	return ocspResult{raw: raw, resp: resp, err: err}, true
}

// shared returns the verified response raw when it is worth stapling
// instead of asking: it verifies for lc under issuer at now and is in the
// first half of its validity.
func (s *stapler) shared(raw []byte, lc *loadedCert, issuer *x509.Certificate, now time.Time) (ocspResult, bool) {
	if len(raw) == 0 {
		return ocspResult{}, false
	}
	if len(raw) > maxSharedStaple {
		s.log.Warn("ignoring shared OCSP staple", "cert", lc.files.CertFile, "err", fmt.Errorf("%d bytes, more than %d", len(raw), maxSharedStaple))
		return ocspResult{}, false
	}
	resp, err := verifyOCSP(raw, lc.leaf, issuer, now)
	if err != nil {
		s.log.Warn("ignoring shared OCSP staple", "cert", lc.files.CertFile, "err", err)
		return ocspResult{}, false
	}
	st := staple{thisUpdate: resp.ThisUpdate, nextUpdate: resp.NextUpdate}
	if half := st.thisUpdate.Add(st.expires().Sub(st.thisUpdate) / 2); !now.Before(half) {
		return ocspResult{}, false
	}
	return ocspResult{raw: raw, resp: resp}, true
}

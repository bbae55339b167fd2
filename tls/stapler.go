package tls

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/crypto/ocsp"
)

// stapler keeps OCSP staples: it fetches and verifies responses (ocsp.go),
// schedules refreshes, persists good responses in the state directory, and
// drops expired ones. The state of each certificate is an ocspState that
// the board (the certificate store) holds under its lock; the stapler
// itself holds no state of a certificate, only the rules.
type stapler struct {
	opts     OCSPOptions
	stateDir string
	log      *slog.Logger
	obs      Observer
	now      func() time.Time

	// round serialises refresh rounds, so that two rounds never ask for
	// the same staple at once. Writers of the board never wait for it.
	round sync.Mutex
}

func newStapler(o Options) *stapler {
	return &stapler{opts: o.OCSP, stateDir: o.StateDir, log: o.Logger, obs: o.Observer, now: o.Now}
}

// ocspState is the stapling state of one served pair. A new leaf gets a
// new ocspState, so an answer fetched for a state that is no longer the
// entry's is about a certificate that was replaced meanwhile.
type ocspState struct {
	state       string            // OCSPStatus.State
	issuer      *x509.Certificate // from the chain, the issuer file or caIssuers; nil: not known yet
	staple      *staple
	ocspErr     error
	nextRefresh time.Time
	failures    int
	revokedAt   time.Time
}

// unusableState is the state of a pair that is not served at all.
func unusableState() *ocspState { return &ocspState{state: "unusable"} }

// active reports whether the state is refreshed at all.
func (st *ocspState) active() bool {
	switch st.state {
	case "disabled", "none", "no-issuer", "unusable":
		return false
	}
	return true
}

// due reports whether st is to be refreshed at now (every active one when
// force).
func (st *ocspState) due(now time.Time, force bool) bool {
	return st.active() && (force || !now.Before(st.nextRefresh))
}

// stapleBoard is what a refresh round works on: the certificate store. Each
// method takes the board's writer lock for its own duration only.
type stapleBoard interface {
	// stapleJobs copies what needs a staple at now.
	stapleJobs(now time.Time, force bool) []*stapleJob
	// publishStaples applies the answers whose certificate is still the one
	// asked about, drops expired staples, publishes, and returns when the
	// next refresh or expiry is due (zero: none).
	publishStaples(jobs []*stapleJob) time.Time
}

// stapleJob is one certificate to ask about: a copy of what the request
// needs, taken under the board's lock, and the answer.
type stapleJob struct {
	lc     *loadedCert
	st     *ocspState // the state the answer is for
	issuer *x509.Certificate
	res    ocspResult
}

type ocspResult struct {
	raw    []byte
	resp   *ocsp.Response
	err    error
	issuer *x509.Certificate // fetched from caIssuers in this attempt
}

// refresh is one round: scan (under the board's lock, copy what needs a
// staple), fetch (no lock: a slow responder delays this round only, never
// a Reload), publish (under the lock, only for certificates still served).
func (s *stapler) refresh(ctx context.Context, b stapleBoard, force bool) time.Time {
	s.round.Lock()
	defer s.round.Unlock()
	jobs := b.stapleJobs(s.now(), force)
	s.fetch(ctx, jobs)
	if ctx.Err() != nil {
		jobs = nil // shutting down: not a responder failure
	}
	return b.publishStaples(jobs)
}

// fetch asks the responders of every job in parallel; it takes no lock.
func (s *stapler) fetch(ctx context.Context, jobs []*stapleJob) {
	now := s.now()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { j.res = s.ask(ctx, j.lc, j.issuer, now) })
	}
	wg.Wait()
}

// ask gets a verified answer for lc, fetching its issuer first when it is
// not known.
func (s *stapler) ask(ctx context.Context, lc *loadedCert, issuer *x509.Certificate, now time.Time) ocspResult {
	var fetched *x509.Certificate
	if issuer == nil {
		var err error
		if fetched, err = fetchIssuer(ctx, s.opts.HTTPClient, s.opts.Timeout, lc); err != nil {
			return ocspResult{err: fmt.Errorf("issuer: %w", err)}
		}
		issuer = fetched
	}
	if s.opts.Share != nil {
		if r, ok := s.askFleet(ctx, lc, issuer, now); ok {
			r.issuer = fetched
			return r
		}
	}
	raw, resp, err := fetchOCSP(ctx, s.opts.HTTPClient, s.opts.Timeout, lc, issuer, now)
	return ocspResult{raw, resp, err, fetched}
}

// job returns the request for st, or nil when it is not due.
func job(lc *loadedCert, st *ocspState, now time.Time, force bool) *stapleJob {
	if !st.due(now, force) {
		return nil
	}
	return &stapleJob{lc: lc, st: st, issuer: st.issuer}
}

// reset returns the OCSP state of a freshly loaded pair, with a persisted
// staple when one is still good.
func (s *stapler) reset(lc *loadedCert) *ocspState {
	st := &ocspState{issuer: lc.issuer}
	if st.issuer == nil {
		st.issuer = loadIssuer(issuerFile(s.stateDir, lc), lc)
	}
	switch {
	case s.opts.Disabled:
		st.state = "disabled"
		return st
	case len(ocspResponders(lc.leaf)) == 0:
		// Normal: many CAs have dropped OCSP (Let's Encrypt in 2025).
		st.state = "none"
		s.log.Debug("certificate names no OCSP responder, not stapling", "cert", lc.files.CertFile)
		return st
	case st.issuer == nil && len(lc.caIssuers) == 0:
		st.state = "no-issuer"
		s.log.Warn("certificate names an OCSP responder but no issuer is known (not in the chain, no issuer_file, no http(s) caIssuers URL), not stapling", "cert", lc.files.CertFile)
		return st
	}
	st.state = "pending"
	now := s.now()
	st.nextRefresh = now
	if st.issuer != nil { // with an issuer still to fetch, the first refresh verifies
		s.loadPersisted(lc, st, now)
	}
	return st
}

// loadPersisted serves the persisted staple of lc when it is still good.
func (s *stapler) loadPersisted(lc *loadedCert, st *ocspState, now time.Time) {
	path := stapleFile(s.stateDir, lc)
	if path == "" {
		return
	}
	raw, err := readStateFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("cannot read persisted OCSP staple", "cert", lc.files.CertFile, "file", path, "err", err)
		}
		return
	}
	resp, err := verifyOCSP(raw, lc.leaf, st.issuer, now)
	if err == nil && resp.Status != ocsp.Good {
		err = fmt.Errorf("status %s", ocspStatusName(resp.Status))
	}
	if err != nil {
		s.log.Info("ignoring persisted OCSP staple", "cert", lc.files.CertFile, "file", path, "err", err)
		os.Remove(path)
		return
	}
	st.staple = &staple{raw: raw, thisUpdate: resp.ThisUpdate, nextUpdate: resp.NextUpdate}
	st.state = "good"
	st.nextRefresh = st.staple.refreshAt(now)
}

func ocspStatusName(s int) string {
	switch s {
	case ocsp.Good:
		return "good"
	case ocsp.Revoked:
		return "revoked"
	}
	return "unknown"
}

// apply records one answer about lc in st and returns the observer call
// due once it is published; the board's lock is held.
func (s *stapler) apply(lc *loadedCert, st *ocspState, r ocspResult, now time.Time) func() {
	if r.issuer != nil {
		s.keepIssuer(lc, st, r.issuer)
	}
	if r.err != nil {
		return s.failed(lc, st, r.err, now)
	}
	st.failures = 0
	switch r.resp.Status {
	case ocsp.Good:
		return s.good(lc, st, r, now)
	case ocsp.Revoked:
		return s.revoked(lc, st, r.resp, now)
	}
	return s.unknown(lc, st, now)
}

// keepIssuer adopts an issuer fetched from caIssuers and persists it.
func (s *stapler) keepIssuer(lc *loadedCert, st *ocspState, issuer *x509.Certificate) {
	name := lc.files.CertFile
	st.issuer = issuer
	s.log.Info("certificate issuer fetched from its caIssuers URL", "cert", name, "issuer", issuer.Subject.String())
	if ip := issuerFile(s.stateDir, lc); ip != "" {
		if err := saveStaple(ip, issuer.Raw); err != nil {
			s.log.Warn("cannot persist the fetched issuer", "cert", name, "file", ip, "err", err)
		}
	}
}

func (s *stapler) failed(lc *loadedCert, st *ocspState, err error, now time.Time) func() {
	name := lc.files.CertFile
	st.failures++
	st.ocspErr = err
	delay := backoff(st.failures)
	if st.staple != nil {
		// Keep serving the last good staple, and retry before it expires.
		if left := st.staple.expires().Sub(now) / 2; left < delay {
			delay = max(left, 5*time.Second)
		}
	} else {
		st.state = "error"
	}
	st.nextRefresh = now.Add(delay)
	s.log.Warn("OCSP refresh failed", "cert", name, "err", err, "keeping_staple", st.staple != nil, "retry_in", delay.Round(time.Second))
	return func() { s.obs.OCSPRefreshed(name, "error", err) }
}

func (s *stapler) good(lc *loadedCert, st *ocspState, r ocspResult, now time.Time) func() {
	name := lc.files.CertFile
	st.staple = &staple{raw: r.raw, thisUpdate: r.resp.ThisUpdate, nextUpdate: r.resp.NextUpdate}
	st.state, st.ocspErr, st.revokedAt = "good", nil, time.Time{}
	st.nextRefresh = st.staple.refreshAt(now)
	if path := stapleFile(s.stateDir, lc); path != "" {
		if err := saveStaple(path, r.raw); err != nil {
			s.log.Warn("cannot persist OCSP staple", "cert", name, "file", path, "err", err)
		}
	}
	s.log.Info("OCSP staple updated", "cert", name, "next_update", r.resp.NextUpdate, "next_refresh", st.nextRefresh)
	return func() { s.obs.OCSPRefreshed(name, "good", nil) }
}

func (s *stapler) revoked(lc *loadedCert, st *ocspState, resp *ocsp.Response, now time.Time) func() {
	name := lc.files.CertFile
	st.staple, st.state, st.revokedAt = nil, "revoked", resp.RevokedAt
	err := fmt.Errorf("certificate file %s (serial %x) is REVOKED since %s (reason %d)",
		name, lc.leaf.SerialNumber, resp.RevokedAt.UTC().Format(time.RFC3339), resp.RevocationReason)
	st.ocspErr = err
	st.nextRefresh = (&staple{thisUpdate: resp.ThisUpdate, nextUpdate: resp.NextUpdate}).refreshAt(now)
	s.forget(lc)
	s.log.Error("certificate is revoked, not stapling; replace it", "cert", name, "err", err)
	return func() { s.obs.OCSPRefreshed(name, "revoked", err) }
}

func (s *stapler) unknown(lc *loadedCert, st *ocspState, now time.Time) func() {
	name := lc.files.CertFile
	st.staple, st.state = nil, "unknown"
	err := fmt.Errorf("OCSP responder does not know certificate file %s (serial %x)", name, lc.leaf.SerialNumber)
	st.ocspErr = err
	st.failures = 1
	st.nextRefresh = now.Add(backoff(st.failures))
	s.forget(lc)
	s.log.Warn("OCSP status unknown, not stapling", "cert", name, "err", err)
	return func() { s.obs.OCSPRefreshed(name, "unknown", err) }
}

// forget removes the persisted staple of lc.
func (s *stapler) forget(lc *loadedCert) {
	if path := stapleFile(s.stateDir, lc); path != "" {
		os.Remove(path)
	}
}

// expire drops the staple of st once it is past its NextUpdate and returns
// the observer call due, or nil when it is still good; the board's lock is
// held.
func (s *stapler) expire(lc *loadedCert, st *ocspState, now time.Time) func() {
	if !st.active() || st.staple == nil || now.Before(st.staple.expires()) {
		return nil
	}
	// Never staple an expired response: clients would reject it.
	name := lc.files.CertFile
	exp := st.staple.expires()
	st.staple, st.state = nil, "expired"
	err := fmt.Errorf("OCSP staple of %s expired at %s without a fresh response (last error: %v)",
		name, exp.UTC().Format(time.RFC3339), st.ocspErr)
	st.ocspErr = err
	s.forget(lc)
	s.log.Warn("OCSP staple expired, not stapling", "cert", name, "err", err)
	return func() { s.obs.OCSPRefreshed(name, "expired", err) }
}

// wake returns the earlier of next and when st next has work.
func (st *ocspState) wake(next time.Time) time.Time {
	if !st.active() {
		return next
	}
	if next.IsZero() || st.nextRefresh.Before(next) {
		next = st.nextRefresh
	}
	if st.staple != nil && st.staple.expires().Before(next) {
		next = st.staple.expires()
	}
	return next
}

// loop refreshes the staples of b until ctx ends.
func (s *stapler) loop(ctx context.Context, b stapleBoard) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		next := s.refresh(ctx, b, false)
		// Wake at the next event, but at least every minute: the clock may
		// jump and responders may come back.
		wait := time.Minute
		if !next.IsZero() {
			wait = min(max(next.Sub(s.now()), time.Second), time.Minute)
		}
		timer.Reset(wait)
	}
}

package tls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// certStore holds the configured certificate pairs: it reads and checks
// them, reloads them when their files change, leaves out the ones that
// are not usable now, and publishes the set that handshakes choose from by
// SNI (sni.go). It is the board the stapler works on: each pair carries its
// OCSP state, guarded by the store's lock.
type certStore struct {
	opts    Options
	log     *slog.Logger
	obs     Observer
	now     func() time.Time
	stapler *stapler

	// certs is what GetCertificate reads: one atomic load of an immutable
	// set. A changed staple or pair publishes a new set of new
	// tls.Certificate values; handed-out ones are never modified.
	certs  atomic.Pointer[certSet]
	status atomic.Pointer[[]CertStatus]

	// reloading serialises reloads (Reload and file polling), so that the
	// files read last are the ones served. A stapling round never waits for
	// it.
	reloading sync.Mutex
	// mu serialises the writers (reloads, the publishing of staples) for
	// the time they change entries; it is never held across a network
	// request. Readers never take it.
	mu      sync.Mutex
	entries []*certEntry
	events  []func() // observer calls due after the next publish
}

// certEntry is the mutable state of one configured pair, guarded by mu.
type certEntry struct {
	files CertFiles
	cur   *loadedCert // served pair, never nil after New
	// unusable, when set, is why cur cannot be served now (expired or not
	// yet valid): the pair is left out of handshakes, not refused.
	unusable error
	sum      [32]byte // digest of the served files
	loadedAt time.Time

	lastErr   error // why the files on disk are refused
	lastErrAt time.Time
	failedSum [32]byte

	seen, pending fileStat // polling: last applied and last observed stat

	// retryAt, when set, makes polling re-read a pair refused only for
	// want of a staple (must-staple, policy refuse); retries counts them.
	retryAt time.Time
	retries int

	ocsp *ocspState // never nil after New
}

// fileStat is what polling compares; a change is confirmed by the content
// digest before anything is reloaded.
type fileStat struct {
	certSize, keySize, issuerSize    int64
	certMtime, keyMtime, issuerMtime int64
	err                              string
}

func statFiles(f CertFiles) fileStat {
	var s fileStat
	ci, err := os.Stat(f.CertFile)
	if err != nil {
		s.err = err.Error()
		return s
	}
	ki, err := os.Stat(f.KeyFile)
	if err != nil {
		s.err = err.Error()
		return s
	}
	s.certSize, s.certMtime = ci.Size(), ci.ModTime().UnixNano()
	s.keySize, s.keyMtime = ki.Size(), ki.ModTime().UnixNano()
	if f.IssuerFile != "" {
		ii, err := os.Stat(f.IssuerFile)
		if err != nil {
			s.err = err.Error()
			return s
		}
		s.issuerSize, s.issuerMtime = ii.Size(), ii.ModTime().UnixNano()
	}
	return s
}

// newCertStore loads every configured pair; the result says what was
// refused and what is left out. The pairs get their OCSP state from
// resetStaples.
func newCertStore(o Options, st *stapler) (*certStore, CheckResult) {
	s := &certStore{opts: o, log: o.Logger, obs: o.Observer, now: o.Now, stapler: st}
	var res CheckResult
	s.entries, res = loadEntries(o, s.now())
	return s, res
}

// loadEntries reads and checks every configured pair. A pair that is only
// out of its validity period is kept, marked unusable, and reported as a
// warning, unless no pair at all is usable: then every such pair is an
// error too.
func loadEntries(o Options, now time.Time) ([]*certEntry, CheckResult) {
	var res CheckResult
	var entries []*certEntry
	usable := 0
	for i, f := range o.Certificates {
		e := &certEntry{files: f, seen: statFiles(f)}
		e.pending = e.seen
		pc, err := fileContents(f)
		var lc *loadedCert
		if err == nil {
			lc, err = checkPair(o, f, pc)
		}
		if err != nil {
			res.Errors = append(res.Errors, Finding{Cert: i, Err: err})
			continue
		}
		e.cur, e.sum, e.loadedAt = lc, pc.sum, now
		if verr := validity(lc, now); verr != nil {
			e.markUnusable(lc, verr, now)
			res.Warnings = append(res.Warnings, Finding{Cert: i, Err: verr})
		} else {
			usable++
		}
		entries = append(entries, e)
	}
	if usable == 0 && len(res.Errors) == 0 && len(o.Certificates) > 0 {
		res.Errors = append(res.Errors, res.Warnings...)
		res.Warnings = nil
		res.Errors = append(res.Errors, Finding{Cert: -1, Err: fmt.Errorf("no usable certificate among the %d configured", len(o.Certificates))})
	}
	return entries, res
}

// checkPair parses a pair and applies the must-staple policy.
func checkPair(o Options, f CertFiles, pc pairContents) (*loadedCert, error) {
	lc, err := parsePair(f, pc)
	if err == nil {
		err = staplePolicy(o, lc)
	}
	return lc, err
}

// markUnusable records that lc, the pair on disk, cannot be served now.
func (e *certEntry) markUnusable(lc *loadedCert, err error, now time.Time) {
	e.cur, e.unusable = lc, err
	e.lastErr, e.lastErrAt = err, now
	e.ocsp = unusableState()
	e.retryAt, e.retries = time.Time{}, 0
	if now.Before(lc.leaf.NotBefore) {
		// Polling serves it once it becomes valid.
		e.retryAt = lc.leaf.NotBefore
	}
}

// resetStaples gives every usable pair its initial OCSP state (a
// persisted staple when there is a good one).
func (s *certStore) resetStaples() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.unusable == nil {
			e.ocsp = s.stapler.reset(e.cur)
		}
	}
}

// getCertificate implements tls.Config.GetCertificate.
func (s *certStore) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.certs.Load().lookup(hello)
}

// reloadAll re-reads every pair now.
func (s *certStore) reloadAll(ctx context.Context) error {
	return s.reload(ctx, func(time.Time) []*certEntry {
		for _, e := range s.entries {
			e.seen = statFiles(e.files)
			e.pending = e.seen
		}
		return s.entries
	})
}

// poll is one polling round: a pair is reloaded when its files' stat
// changed and then stayed the same for one interval, so a cert and key
// written one after the other are read together.
func (s *certStore) poll(ctx context.Context) {
	_ = s.reload(ctx, func(now time.Time) []*certEntry { // logged and kept in Status
		var changed []*certEntry
		for _, e := range s.entries {
			st := statFiles(e.files)
			switch {
			case st == e.seen:
				if !e.retryAt.IsZero() && !now.Before(e.retryAt) {
					changed = append(changed, e)
				}
			case st == e.pending:
				e.seen = st
				changed = append(changed, e)
			}
			e.pending = st
		}
		return changed
	})
}

// reloadRound is one reload: its clock, the new pairs waiting for a
// staple, and the refusals.
type reloadRound struct {
	now   time.Time
	cands []candidate
	errs  []error
}

// candidate is a changed pair with a new leaf, stapled before it is served.
type candidate struct {
	e   *certEntry
	sum [32]byte
	lc  *loadedCert
	st  *ocspState // the new pair's own OCSP state
	job *stapleJob // nil: no request due
}

// reload re-reads the entries pick returns (pick runs under the lock). It
// is done in three steps, so that no network request runs under the lock
// and a stapling round stuck at a responder never holds it up: read and
// check the files (lock held), staple the pairs with a new leaf (no lock),
// then swap them in (lock held). A stapling round that asked about the
// previous leaf meanwhile sees a new OCSP state and drops its answer
// (publishStaples). A new certificate carries its staple from its first
// handshake (nginx staples lazily, and must-staple sites fail meanwhile:
// acme.sh#2938).
func (s *certStore) reload(ctx context.Context, pick func(now time.Time) []*certEntry) error {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	s.mu.Lock()
	r := &reloadRound{now: s.now()}
	list := pick(r.now)
	for _, e := range list {
		s.scan(r, e)
	}
	s.mu.Unlock()
	if len(list) == 0 {
		return nil
	}

	var jobs []*stapleJob
	due := s.now() // not r.now: reset scheduled the new states after it
	for i, c := range r.cands {
		if j := job(c.lc, c.st, due, false); j != nil {
			r.cands[i].job = j
			jobs = append(jobs, j)
		}
	}
	s.stapler.fetch(ctx, jobs)

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, c := range r.cands {
		if c.job != nil && ctx.Err() == nil {
			s.later(s.stapler.apply(c.lc, c.st, c.job.res, now))
		}
		s.adopt(r, c)
	}
	s.publish()
	return errors.Join(r.errs...)
}

// scan reads the files of e and settles what needs no staple: unchanged,
// refused, still unusable, or the same leaf again; a new leaf becomes a
// candidate. mu is held.
func (s *certStore) scan(r *reloadRound, e *certEntry) {
	pc, err := fileContents(e.files)
	sum := pc.sum
	if err == nil && sum == e.sum && e.unusable == nil {
		if e.lastErr != nil {
			s.log.Info("certificate files are back to the served pair", "cert", e.files.CertFile)
			e.lastErr, e.failedSum = nil, [32]byte{}
			e.retryAt, e.retries = time.Time{}, 0
		}
		return
	}
	var lc *loadedCert
	if err == nil {
		lc, err = checkPair(s.opts, e.files, pc)
	}
	if err == nil {
		if verr := validity(lc, r.now); verr != nil {
			if e.unusable != nil {
				// Nothing of this pair is served: follow the files.
				s.stillUnusable(e, lc, sum, verr, r.now)
				return
			}
			err = verr
		}
	}
	if err != nil {
		e.retryAt = time.Time{}
		s.refuse(r, e, sum, err)
		return
	}
	if lc.id == e.cur.id && e.unusable == nil {
		s.commit(e, lc, sum, r.now) // same leaf: the staple stays valid
		return
	}
	r.cands = append(r.cands, candidate{e: e, sum: sum, lc: lc, st: s.stapler.reset(lc)})
}

// adopt swaps in a stapled candidate, or refuses a must-staple one without
// a staple; mu is held. Only reloads change cur, and they run one at a
// time, so e still serves what scan saw.
func (s *certStore) adopt(r *reloadRound, c candidate) {
	if c.lc.mustStaple && s.opts.OCSP.MustStaple == MustStapleRefuse && c.st.staple == nil {
		// Swapping in a must-staple pair that cannot be served would take
		// its names down: keep the previous pair and try again later.
		c.e.retries++
		c.e.retryAt = r.now.Add(backoff(c.e.retries))
		s.refuse(r, c.e, c.sum, fmt.Errorf("certificate file %s: must-staple certificate without a valid OCSP staple (policy %q): %w",
			c.lc.files.CertFile, MustStapleRefuse, c.st.ocspErr))
		return
	}
	s.commit(c.e, c.lc, c.sum, r.now)
	c.e.ocsp = c.st
}

// refuse records that the files of e are not served; mu is held.
func (s *certStore) refuse(r *reloadRound, e *certEntry, sum [32]byte, err error) {
	name := e.files.CertFile
	// Log and report once per distinct broken content and reason.
	if e.lastErr == nil || e.lastErr.Error() != err.Error() || e.failedSum != sum {
		s.log.Error("certificate reload refused, previous certificate keeps serving", "cert", name, "err", err)
		s.later(func() { s.obs.CertReloaded(name, err) })
		e.lastErrAt = r.now
	}
	e.lastErr, e.failedSum = err, sum
	r.errs = append(r.errs, err)
}

// commit serves lc for e; mu is held.
func (s *certStore) commit(e *certEntry, lc *loadedCert, sum [32]byte, now time.Time) {
	name := e.files.CertFile
	e.cur, e.sum, e.loadedAt = lc, sum, now
	e.unusable = nil
	e.lastErr, e.failedSum = nil, [32]byte{}
	e.retryAt, e.retries = time.Time{}, 0
	s.log.Info("certificate reloaded", "cert", name, "names", lc.names, "not_after", lc.leaf.NotAfter)
	s.later(func() { s.obs.CertReloaded(name, nil) })
}

// stillUnusable records new files of an unusable pair that are unusable
// too, logging once per distinct content; mu is held.
func (s *certStore) stillUnusable(e *certEntry, lc *loadedCert, sum [32]byte, err error, now time.Time) {
	if sum != e.sum {
		s.log.Error("certificate not usable, not served", "cert", e.files.CertFile, "err", err)
		name := e.files.CertFile
		s.later(func() { s.obs.CertReloaded(name, err) })
	}
	e.sum, e.loadedAt = sum, now
	e.markUnusable(lc, err, now)
}

// stapleJobs implements stapleBoard.
func (s *certStore) stapleJobs(now time.Time, force bool) []*stapleJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	var jobs []*stapleJob
	for _, e := range s.entries {
		if j := job(e.cur, e.ocsp, now, force); j != nil {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// publishStaples implements stapleBoard.
func (s *certStore) publishStaples(jobs []*stapleJob) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	changed := false
	for _, j := range jobs {
		if e := s.servedWith(j); e != nil {
			s.later(s.stapler.apply(e.cur, e.ocsp, j.res, now))
			changed = true
		} else {
			s.log.Debug("OCSP answer for a replaced certificate dropped", "cert", j.lc.files.CertFile)
		}
	}
	var next time.Time
	for _, e := range s.entries {
		if ev := s.stapler.expire(e.cur, e.ocsp, now); ev != nil {
			s.later(ev)
			changed = true
		}
		next = e.ocsp.wake(next)
	}
	if changed {
		s.publish()
	}
	return next
}

// servedWith returns the entry that still serves the leaf j asked about
// with the same OCSP state, or nil when it was replaced; mu is held.
func (s *certStore) servedWith(j *stapleJob) *certEntry {
	for _, e := range s.entries {
		if e.ocsp == j.st && e.cur.id == j.lc.id {
			return e
		}
	}
	return nil
}

// publish builds the certificate set and the status from the entries; mu is
// held.
func (s *certStore) publish() {
	pairs := make([]servedPair, 0, len(s.entries))
	status := make([]CertStatus, 0, len(s.entries))
	for i, e := range s.entries {
		p := s.served(e)
		pairs = append(pairs, p)
		status = append(status, certStatus(e, i == 0, p.cert != nil))
	}
	s.certs.Store(buildCertSet(pairs))
	s.status.Store(&status)
	// Events go out after publishing, so an observer that reacts (or a test
	// that waits) sees what they report already served.
	for _, ev := range s.events {
		ev()
	}
	s.events = nil
}

// served is what handshakes get of e: nothing when it is unusable or a
// must-staple pair without a staple under policy refuse.
func (s *certStore) served(e *certEntry) servedPair {
	lc, st := e.cur, e.ocsp
	p := servedPair{lc: lc, unusable: e.unusable != nil}
	if !p.unusable && (st.staple != nil || !lc.mustStaple || s.opts.OCSP.MustStaple != MustStapleRefuse) {
		c := lc.tls // a new value: handed-out certificates stay untouched
		if st.staple != nil {
			c.OCSPStaple = st.staple.raw
		}
		p.cert = &c
	}
	return p
}

func certStatus(e *certEntry, isDefault, served bool) CertStatus {
	lc, st := e.cur, e.ocsp
	cs := CertStatus{
		CertFile:  e.files.CertFile,
		KeyFile:   e.files.KeyFile,
		Names:     slices.Clone(lc.names),
		Default:   isDefault,
		KeyType:   lc.keyType,
		Serial:    fmt.Sprintf("%x", lc.leaf.SerialNumber),
		NotBefore: lc.leaf.NotBefore,
		NotAfter:  lc.leaf.NotAfter,
		LoadedAt:  e.loadedAt,
		Served:    served,
		Usable:    e.unusable == nil,
		OCSP: OCSPStatus{
			State:       st.state,
			Responders:  ocspResponders(lc.leaf),
			MustStaple:  lc.mustStaple,
			Stapled:     st.staple != nil,
			NextRefresh: st.nextRefresh,
			RevokedAt:   st.revokedAt,
		},
	}
	if e.lastErr != nil {
		cs.LastError, cs.LastErrorAt = e.lastErr.Error(), e.lastErrAt
	}
	if st.staple != nil {
		cs.OCSP.ThisUpdate, cs.OCSP.NextUpdate = st.staple.thisUpdate, st.staple.nextUpdate
	}
	if st.ocspErr != nil {
		cs.OCSP.LastError = st.ocspErr.Error()
	}
	return cs
}

// later queues an observer call for the end of the next publish; mu is
// held. A nil call is ignored.
func (s *certStore) later(f func()) {
	if f != nil {
		s.events = append(s.events, f)
	}
}

// snapshot returns a copy of the published status.
func (s *certStore) snapshot() []CertStatus {
	p := s.status.Load()
	if p == nil {
		return nil
	}
	out := make([]CertStatus, len(*p))
	for i, c := range *p {
		c.Names = slices.Clone(c.Names)
		c.OCSP.Responders = slices.Clone(c.OCSP.Responders)
		out[i] = c
	}
	return out
}

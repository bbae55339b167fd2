package tls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ocsp"
)

// Terminator owns the server side of TLS for edge's listeners: the
// certificates (chosen by SNI, reloaded without dropping connections), the
// session-ticket keys and their rotation, and OCSP staples. Build it with
// New, hand TLSConfig to tls.NewListener, and run Run for the background
// work. All methods are safe for concurrent use.
type Terminator struct {
	opts    Options
	log     *slog.Logger
	obs     Observer
	now     func() time.Time
	base    *tls.Config
	tickets *ticketKeys // nil when disabled

	// certs is what GetCertificate reads: one atomic load of an immutable
	// set. A changed staple or pair publishes a new set of new
	// tls.Certificate values; handed-out ones are never modified.
	certs      atomic.Pointer[certSet]
	certStatus atomic.Pointer[[]CertStatus]
	running    atomic.Bool

	// mu serialises the writers: Reload, file polling, OCSP refresh. It is
	// held across OCSP requests (bounded by OCSP.Timeout); readers never
	// take it.
	mu           sync.Mutex
	entries      []*certEntry
	ticketErrLog string   // last ticket source error logged
	events       []func() // observer calls due after the next publish
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

	ocspState
}

// ocspState is the stapling state of one served pair.
type ocspState struct {
	state       string            // OCSPStatus.State
	issuer      *x509.Certificate // from the chain, the issuer file or caIssuers; nil: not known yet
	staple      *staple
	ocspErr     error
	nextRefresh time.Time
	failures    int
	revokedAt   time.Time
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

// suites12 are the only TLS 1.2 suites offered: forward secret (ECDHE) and
// AEAD. TLS 1.3 suites are not configurable in crypto/tls and are all AEAD.
var suites12 = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// New loads and checks every certificate pair (any problem is an error that
// names the file and says what is wrong), the client CA file, and the
// ticket key source, then fetches OCSP staples (or reads persisted ones) so
// that the first handshake already carries them.
func New(o Options) (*Terminator, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("edgetls: %w", err)
	}
	t := &Terminator{opts: o, log: o.Logger, obs: o.Observer, now: o.Now}
	entries, res := loadEntries(o, t.now())
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("edgetls: %w", err)
	}
	t.entries = entries
	for _, w := range res.Warnings {
		// HAProxy and nginx start and serve the other certificates; so
		// does edge, and says loudly which one is left out.
		t.log.Error("certificate not usable, not served", "cert", o.Certificates[w.Cert].CertFile, "err", w.Err)
	}

	cfg := &tls.Config{
		MinVersion:     o.MinVersion,
		CipherSuites:   suites12,
		GetCertificate: t.getCertificate,
		// Only HTTP/1.1: the WebSocket upgrade (RFC 6455) needs it; RFC 8441
		// over h2 is not served.
		NextProtos: []string{"http/1.1"},
		Time:       t.now,
		// crypto/tls servers never renegotiate (Config.Renegotiation is a
		// client setting), which is what we want.
		SessionTicketsDisabled: o.Tickets.Disabled,
	}
	if o.ClientCAFile != "" {
		pool, err := clientCAs(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("edgetls: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if !o.Tickets.Disabled {
		t.tickets, err = newTicketKeys(o.Tickets, t.now)
		if err != nil {
			return nil, fmt.Errorf("edgetls: session tickets: %w", err)
		}
		// Callbacks rather than SetSessionTicketKeys: they survive
		// Config.Clone (net/http's ServeTLS and http2.ConfigureServer
		// clone the config, and a clone would keep stale keys forever),
		// they let retired keys be cleared, and the issue time sealed in the
		// ticket bounds its age exactly, whatever the key source.
		cfg.WrapSession = t.tickets.wrap
		cfg.UnwrapSession = t.tickets.unwrap
	}
	t.base = cfg

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.entries {
		if e.unusable == nil {
			t.ocspReset(e)
		}
	}
	t.refreshDue(ctx, t.entries, false)
	t.publish()
	for _, e := range t.entries {
		if e.unusable != nil {
			continue
		}
		t.log.Info("certificate loaded", "cert", e.files.CertFile, "names", e.cur.names,
			"key_type", e.cur.keyType, "not_after", e.cur.leaf.NotAfter, "ocsp", e.state)
	}
	return t, nil
}

// TLSConfig returns a new *tls.Config for tls.NewListener. Every returned
// config (and any clone of it) follows certificate reloads, staple updates
// and key rotations.
func (t *Terminator) TLSConfig() *tls.Config { return t.base.Clone() }

func (t *Terminator) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return t.certs.Load().lookup(hello)
}

// Reload re-reads every certificate pair now (main calls it on SIGHUP). A
// pair whose files are broken keeps serving its previous version; the error
// names each such file and the reason.
func (t *Terminator) Reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.entries {
		e.seen = statFiles(e.files)
		e.pending = e.seen
	}
	return t.reloadEntries(context.Background(), t.entries)
}

// reloadEntries re-reads the given entries; mu is held. A changed pair is
// parsed and checked, then stapled, then published: a new certificate
// carries its staple from its first handshake (nginx staples lazily, and
// must-staple sites fail meanwhile: acme.sh#2938).
func (t *Terminator) reloadEntries(ctx context.Context, list []*certEntry) error {
	now := t.now()
	var errs []error
	refuse := func(e *certEntry, sum [32]byte, err error) {
		name := e.files.CertFile
		// Log and report once per distinct broken content and reason.
		if e.lastErr == nil || e.lastErr.Error() != err.Error() || e.failedSum != sum {
			t.log.Error("certificate reload refused, previous certificate keeps serving", "cert", name, "err", err)
			t.later(func() { t.obs.CertReloaded(name, err) })
			e.lastErrAt = now
		}
		e.lastErr, e.failedSum = err, sum
		errs = append(errs, err)
	}
	commit := func(e *certEntry, lc *loadedCert, sum [32]byte) {
		name := e.files.CertFile
		e.cur, e.sum, e.loadedAt = lc, sum, now
		e.unusable = nil
		e.lastErr, e.failedSum = nil, [32]byte{}
		e.retryAt, e.retries = time.Time{}, 0
		t.log.Info("certificate reloaded", "cert", name, "names", lc.names, "not_after", lc.leaf.NotAfter)
		t.later(func() { t.obs.CertReloaded(name, nil) })
	}

	type candidate struct {
		e   *certEntry
		sum [32]byte
		tmp *certEntry // the new pair with its own OCSP state
	}
	var cands []candidate
	var tmps []*certEntry
	for _, e := range list {
		pc, err := fileContents(e.files)
		sum := pc.sum
		if err == nil && sum == e.sum && e.unusable == nil {
			if e.lastErr != nil {
				t.log.Info("certificate files are back to the served pair", "cert", e.files.CertFile)
				e.lastErr, e.failedSum = nil, [32]byte{}
				e.retryAt, e.retries = time.Time{}, 0
			}
			continue
		}
		var lc *loadedCert
		if err == nil {
			lc, err = parsePair(e.files, pc)
		}
		if err == nil {
			err = staplePolicy(t.opts, lc)
		}
		if err == nil {
			if verr := validity(lc, now); verr != nil {
				if e.unusable != nil {
					// Nothing of this pair is served: follow the files.
					t.stillUnusable(e, lc, sum, verr, now)
					continue
				}
				err = verr
			}
		}
		if err != nil {
			e.retryAt = time.Time{}
			refuse(e, sum, err)
			continue
		}
		if lc.id == e.cur.id && e.unusable == nil {
			commit(e, lc, sum) // same leaf: the staple stays valid
			continue
		}
		tmp := &certEntry{files: e.files, cur: lc}
		t.ocspReset(tmp)
		cands = append(cands, candidate{e, sum, tmp})
		tmps = append(tmps, tmp)
	}
	t.refreshDue(ctx, tmps, false)
	for _, c := range cands {
		lc := c.tmp.cur
		if lc.mustStaple && t.opts.OCSP.MustStaple == MustStapleRefuse && c.tmp.staple == nil {
			// Swapping in a must-staple pair that cannot be served would take
			// its names down: keep the previous pair and try again later.
			c.e.retries++
			c.e.retryAt = now.Add(backoff(c.e.retries))
			refuse(c.e, c.sum, fmt.Errorf("certificate file %s: must-staple certificate without a valid OCSP staple (policy %q): %w",
				lc.files.CertFile, MustStapleRefuse, c.tmp.ocspErr))
			continue
		}
		commit(c.e, lc, c.sum)
		c.e.ocspState = c.tmp.ocspState
	}
	t.publish()
	return errors.Join(errs...)
}

// stillUnusable records new files of an unusable pair that are unusable
// too, logging once per distinct content; mu is held.
func (t *Terminator) stillUnusable(e *certEntry, lc *loadedCert, sum [32]byte, err error, now time.Time) {
	if sum != e.sum {
		t.log.Error("certificate not usable, not served", "cert", e.files.CertFile, "err", err)
		name := e.files.CertFile
		t.later(func() { t.obs.CertReloaded(name, err) })
	}
	e.sum, e.loadedAt = sum, now
	e.markUnusable(lc, err, now)
}

// pollFiles is one polling round: a pair is reloaded when its files' stat
// changed and then stayed the same for one interval, so a cert and key
// written one after the other are read together.
func (t *Terminator) pollFiles(ctx context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var changed []*certEntry
	now := t.now()
	for _, e := range t.entries {
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
	if len(changed) > 0 {
		_ = t.reloadEntries(ctx, changed) // logged and kept in Status
	}
}

// publish builds the certificate set and the status from the entries; mu is
// held.
func (t *Terminator) publish() {
	pairs := make([]servedPair, 0, len(t.entries))
	status := make([]CertStatus, 0, len(t.entries))
	for i, e := range t.entries {
		lc := e.cur
		p := servedPair{lc: lc, unusable: e.unusable != nil}
		if !p.unusable && (e.staple != nil || !lc.mustStaple || t.opts.OCSP.MustStaple != MustStapleRefuse) {
			c := lc.tls // a new value: handed-out certificates stay untouched
			if e.staple != nil {
				c.OCSPStaple = e.staple.raw
			}
			p.cert = &c
		}
		pairs = append(pairs, p)
		cs := CertStatus{
			CertFile:  e.files.CertFile,
			KeyFile:   e.files.KeyFile,
			Names:     slices.Clone(lc.names),
			Default:   i == 0,
			KeyType:   lc.keyType,
			Serial:    fmt.Sprintf("%x", lc.leaf.SerialNumber),
			NotBefore: lc.leaf.NotBefore,
			NotAfter:  lc.leaf.NotAfter,
			LoadedAt:  e.loadedAt,
			Served:    p.cert != nil,
			Usable:    !p.unusable,
			OCSP: OCSPStatus{
				State:       e.state,
				Responders:  ocspResponders(lc.leaf),
				MustStaple:  lc.mustStaple,
				Stapled:     e.staple != nil,
				NextRefresh: e.nextRefresh,
				RevokedAt:   e.revokedAt,
			},
		}
		if e.lastErr != nil {
			cs.LastError, cs.LastErrorAt = e.lastErr.Error(), e.lastErrAt
		}
		if e.staple != nil {
			cs.OCSP.ThisUpdate, cs.OCSP.NextUpdate = e.staple.thisUpdate, e.staple.nextUpdate
		}
		if e.ocspErr != nil {
			cs.OCSP.LastError = e.ocspErr.Error()
		}
		status = append(status, cs)
	}
	t.certs.Store(buildCertSet(pairs))
	t.certStatus.Store(&status)
	// Events go out after publishing, so an observer that reacts (or a test
	// that waits) sees what they report already served.
	for _, ev := range t.events {
		ev()
	}
	t.events = nil
}

// later queues an observer call for the end of the next publish; mu is held.
func (t *Terminator) later(f func()) { t.events = append(t.events, f) }

// Status reports the certificates and ticket keys; it takes no lock that
// writers hold.
func (t *Terminator) Status() Status {
	var s Status
	if p := t.certStatus.Load(); p != nil {
		s.Certificates = make([]CertStatus, len(*p))
		for i, c := range *p {
			c.Names = slices.Clone(c.Names)
			c.OCSP.Responders = slices.Clone(c.OCSP.Responders)
			s.Certificates[i] = c
		}
	}
	if t.tickets != nil {
		s.Tickets = t.tickets.status()
	}
	return s
}

// ocspReset sets the OCSP state of a freshly loaded pair and picks up a
// persisted staple; mu is held.
func (t *Terminator) ocspReset(e *certEntry) {
	lc := e.cur
	e.staple, e.ocspErr, e.failures = nil, nil, 0
	e.nextRefresh, e.revokedAt = time.Time{}, time.Time{}
	e.issuer = lc.issuer
	if e.issuer == nil {
		e.issuer = loadIssuer(issuerFile(t.opts.StateDir, lc), lc)
	}
	switch {
	case t.opts.OCSP.Disabled:
		e.state = "disabled"
		return
	case len(ocspResponders(lc.leaf)) == 0:
		// Normal: many CAs have dropped OCSP (Let's Encrypt in 2025).
		e.state = "none"
		t.log.Debug("certificate names no OCSP responder, not stapling", "cert", lc.files.CertFile)
		return
	case e.issuer == nil && len(lc.caIssuers) == 0:
		e.state = "no-issuer"
		t.log.Warn("certificate names an OCSP responder but no issuer is known (not in the chain, no issuer_file, no http(s) caIssuers URL), not stapling", "cert", lc.files.CertFile)
		return
	}
	e.state = "pending"
	now := t.now()
	e.nextRefresh = now
	path := stapleFile(t.opts.StateDir, lc)
	if path == "" || e.issuer == nil {
		return // with an issuer still to fetch, the first refresh verifies
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			t.log.Warn("cannot read persisted OCSP staple", "cert", lc.files.CertFile, "file", path, "err", err)
		}
		return
	}
	resp, err := verifyOCSP(raw, lc.leaf, e.issuer, now)
	if err == nil && resp.Status != ocsp.Good {
		err = fmt.Errorf("status %s", ocspStatusName(resp.Status))
	}
	if err != nil {
		t.log.Info("ignoring persisted OCSP staple", "cert", lc.files.CertFile, "file", path, "err", err)
		os.Remove(path)
		return
	}
	e.staple = &staple{raw: raw, thisUpdate: resp.ThisUpdate, nextUpdate: resp.NextUpdate}
	e.state = "good"
	e.nextRefresh = e.staple.refreshAt(now)
}

func ocspActive(e *certEntry) bool {
	switch e.state {
	case "disabled", "none", "no-issuer", "unusable":
		return false
	}
	return true
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

type ocspResult struct {
	raw    []byte
	resp   *ocsp.Response
	err    error
	issuer *x509.Certificate // fetched from caIssuers in this attempt
}

// refreshDue asks the responders of the due entries (all active ones when
// force), in parallel, and applies the answers; mu is held. It reports
// whether anything was applied.
func (t *Terminator) refreshDue(ctx context.Context, list []*certEntry, force bool) bool {
	now := t.now()
	var due []*certEntry
	for _, e := range list {
		if ocspActive(e) && (force || !now.Before(e.nextRefresh)) {
			due = append(due, e)
		}
	}
	if len(due) == 0 {
		return false
	}
	res := make([]ocspResult, len(due))
	var wg sync.WaitGroup
	for i, e := range due {
		issuer := e.issuer
		wg.Go(func() {
			var fetched *x509.Certificate
			if issuer == nil {
				var err error
				if fetched, err = fetchIssuer(ctx, t.opts.OCSP.HTTPClient, t.opts.OCSP.Timeout, e.cur); err != nil {
					res[i] = ocspResult{err: fmt.Errorf("issuer: %w", err)}
					return
				}
				issuer = fetched
			}
			raw, resp, err := fetchOCSP(ctx, t.opts.OCSP.HTTPClient, t.opts.OCSP.Timeout, e.cur, issuer, now)
			res[i] = ocspResult{raw, resp, err, fetched}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false // shutting down: not a responder failure
	}
	now = t.now()
	for i, e := range due {
		t.applyOCSP(e, res[i], now)
	}
	return true
}

// applyOCSP records one answer; mu is held.
func (t *Terminator) applyOCSP(e *certEntry, r ocspResult, now time.Time) {
	name := e.files.CertFile
	path := stapleFile(t.opts.StateDir, e.cur)
	if r.issuer != nil {
		e.issuer = r.issuer
		t.log.Info("certificate issuer fetched from its caIssuers URL", "cert", name, "issuer", r.issuer.Subject.String())
		if ip := issuerFile(t.opts.StateDir, e.cur); ip != "" {
			if err := saveStaple(ip, r.issuer.Raw); err != nil {
				t.log.Warn("cannot persist the fetched issuer", "cert", name, "file", ip, "err", err)
			}
		}
	}
	if r.err != nil {
		e.failures++
		e.ocspErr = r.err
		delay := backoff(e.failures)
		if e.staple != nil {
			// Keep serving the last good staple, and retry before it expires.
			if left := e.staple.expires().Sub(now) / 2; left < delay {
				delay = max(left, 5*time.Second)
			}
		} else {
			e.state = "error"
		}
		e.nextRefresh = now.Add(delay)
		t.log.Warn("OCSP refresh failed", "cert", name, "err", r.err, "keeping_staple", e.staple != nil, "retry_in", delay.Round(time.Second))
		t.later(func() { t.obs.OCSPRefreshed(name, "error", r.err) })
		return
	}
	e.failures = 0
	resp := r.resp
	switch resp.Status {
	case ocsp.Good:
		e.staple = &staple{raw: r.raw, thisUpdate: resp.ThisUpdate, nextUpdate: resp.NextUpdate}
		e.state, e.ocspErr, e.revokedAt = "good", nil, time.Time{}
		e.nextRefresh = e.staple.refreshAt(now)
		if path != "" {
			if err := saveStaple(path, r.raw); err != nil {
				t.log.Warn("cannot persist OCSP staple", "cert", name, "file", path, "err", err)
			}
		}
		t.log.Info("OCSP staple updated", "cert", name, "next_update", resp.NextUpdate, "next_refresh", e.nextRefresh)
		t.later(func() { t.obs.OCSPRefreshed(name, "good", nil) })
	case ocsp.Revoked:
		e.staple, e.state, e.revokedAt = nil, "revoked", resp.RevokedAt
		e.ocspErr = fmt.Errorf("certificate file %s (serial %x) is REVOKED since %s (reason %d)",
			name, e.cur.leaf.SerialNumber, resp.RevokedAt.UTC().Format(time.RFC3339), resp.RevocationReason)
		e.nextRefresh = (&staple{thisUpdate: resp.ThisUpdate, nextUpdate: resp.NextUpdate}).refreshAt(now)
		if path != "" {
			os.Remove(path)
		}
		t.log.Error("certificate is revoked, not stapling; replace it", "cert", name, "err", e.ocspErr)
		err := e.ocspErr
		t.later(func() { t.obs.OCSPRefreshed(name, "revoked", err) })
	default:
		e.staple, e.state = nil, "unknown"
		e.ocspErr = fmt.Errorf("OCSP responder does not know certificate file %s (serial %x)", name, e.cur.leaf.SerialNumber)
		e.failures = 1
		e.nextRefresh = now.Add(backoff(e.failures))
		if path != "" {
			os.Remove(path)
		}
		t.log.Warn("OCSP status unknown, not stapling", "cert", name, "err", e.ocspErr)
		err := e.ocspErr
		t.later(func() { t.obs.OCSPRefreshed(name, "unknown", err) })
	}
}

// ocspTick refreshes due staples and drops expired ones, then returns when
// it next has work.
func (t *Terminator) ocspTick(ctx context.Context, force bool) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := t.refreshDue(ctx, t.entries, force)
	now := t.now()
	var next time.Time
	for _, e := range t.entries {
		if !ocspActive(e) {
			continue
		}
		if e.staple != nil && !now.Before(e.staple.expires()) {
			// Never staple an expired response: clients would reject it.
			exp := e.staple.expires()
			e.staple, e.state = nil, "expired"
			e.ocspErr = fmt.Errorf("OCSP staple of %s expired at %s without a fresh response (last error: %v)",
				e.files.CertFile, exp.UTC().Format(time.RFC3339), e.ocspErr)
			if path := stapleFile(t.opts.StateDir, e.cur); path != "" {
				os.Remove(path)
			}
			t.log.Warn("OCSP staple expired, not stapling", "cert", e.files.CertFile, "err", e.ocspErr)
			name, err := e.files.CertFile, e.ocspErr
			t.later(func() { t.obs.OCSPRefreshed(name, "expired", err) })
			changed = true
		}
		if next.IsZero() || e.nextRefresh.Before(next) {
			next = e.nextRefresh
		}
		if e.staple != nil && e.staple.expires().Before(next) {
			next = e.staple.expires()
		}
	}
	if changed {
		t.publish()
	}
	return next
}

// rotateTickets starts a new ticket key (generated keys only).
func (t *Terminator) rotateTickets() error {
	gen, err := t.tickets.rotate()
	if err != nil {
		t.log.Error("session ticket key rotation failed", "err", err)
		return err
	}
	t.log.Info("session ticket keys rotated", "generation", gen)
	t.obs.TicketKeysRotated()
	return nil
}

// pollTicketKeys asks the key source for keys.
func (t *Terminator) pollTicketKeys(ctx context.Context) error {
	changed, err := t.tickets.load(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && err.Error() != t.ticketErrLog {
			t.log.Error("session ticket keys not reloaded, previous keys stay", "source", t.tickets.kind, "err", err)
			t.ticketErrLog = err.Error()
		}
		return err
	}
	t.ticketErrLog = ""
	if changed {
		t.log.Info("session ticket keys reloaded", "source", t.tickets.kind)
		t.obs.TicketKeysRotated()
	}
	return nil
}

// Run does the background work until ctx ends: polling the certificate files
// every ReloadInterval, rotating generated ticket keys every RotateEvery (or
// polling the key source), refreshing OCSP staples and dropping expired
// ones. Every goroutine it starts has returned when it returns; a panic in
// one loop is logged and the loop restarted after a pause.
func (t *Terminator) Run(ctx context.Context) error {
	if !t.running.CompareAndSwap(false, true) {
		return errors.New("edgetls: Run is already running")
	}
	defer t.running.Store(false)
	var wg sync.WaitGroup
	start := func(name string, loop func(context.Context)) {
		wg.Go(func() { t.supervise(ctx, name, loop) })
	}
	if t.opts.ReloadInterval > 0 {
		start("files", func(ctx context.Context) {
			every(ctx, t.opts.ReloadInterval, func() { t.pollFiles(ctx) })
		})
	}
	if t.tickets != nil {
		if t.tickets.source == nil {
			start("ticket rotation", func(ctx context.Context) {
				every(ctx, t.opts.Tickets.RotateEvery, func() { _ = t.rotateTickets() })
			})
		} else if t.opts.ReloadInterval > 0 {
			start("ticket keys", func(ctx context.Context) {
				every(ctx, t.opts.ReloadInterval, func() { _ = t.pollTicketKeys(ctx) })
			})
		}
	}
	if !t.opts.OCSP.Disabled {
		start("ocsp", t.ocspLoop)
	}
	wg.Wait()
	return nil
}

func every(ctx context.Context, d time.Duration, f func()) {
	tk := time.NewTicker(d)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			f()
		}
	}
}

func (t *Terminator) ocspLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		next := t.ocspTick(ctx, false)
		// Wake at the next event, but at least every minute: the clock may
		// jump and responders may come back.
		wait := time.Minute
		if !next.IsZero() {
			wait = min(max(next.Sub(t.now()), time.Second), time.Minute)
		}
		timer.Reset(wait)
	}
}

// supervise runs loop until ctx ends, restarting it after a panic with a
// growing pause.
func (t *Terminator) supervise(ctx context.Context, name string, loop func(context.Context)) {
	pause := time.Second
	for ctx.Err() == nil {
		if !t.protect(ctx, name, loop) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Minute)
	}
}

// protect runs loop and reports whether it panicked.
func (t *Terminator) protect(ctx context.Context, name string, loop func(context.Context)) (panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			t.log.Error("background loop panicked, restarting", "loop", name, "panic", r, "stack", string(debug.Stack()))
			panicked = true
		}
	}()
	loop(ctx)
	return false
}

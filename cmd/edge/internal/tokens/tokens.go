package tokens

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/internal/trust"
	"github.com/edgelb/edge/proxy"
)

// Target is what enforces the revocations: proxy.Server.
type Target interface {
	// SetRevoked replaces the revocations in force and closes the live
	// connections they name; it returns how many it asked to close.
	SetRevoked(r *auth.Revoked) int
}

// FleetStore stores a revocation of fleet scope: fleet.Revocations.
type FleetStore interface {
	Put(ctx context.Context, r auth.Revocation) error
}

// Options configure Tokens.
type Options struct {
	Log *slog.Logger
	// StateDir keeps this edge's own revocations (revocations.json).
	StateDir string
	Now      func() time.Time
}

// Tokens is the token component. Its zero value is not usable: New.
type Tokens struct {
	log      *slog.Logger
	stateDir string
	now      func() time.Time

	pubMu     sync.Mutex // serialises publish
	mu        sync.Mutex
	cfg       conf.Auth
	providers map[string]*provider // by name
	file      []auth.Revocation
	local     []auth.Revocation
	fleet     []auth.Revocation
	target    Target
	store     FleetStore
	compiled  *auth.Revoked
	closed    uint64          // live connections asked to close by revocations
	ctx       context.Context // Run's; nil before Run
}

// provider is one provider of the file, built: its rules and its keys.
type provider struct {
	conf   conf.AuthProvider
	rules  *auth.Provider
	source *auth.Source
	stop   context.CancelFunc // its refresh; nil before Run
}

// New builds the providers of cfg (their keys are not fetched: Load) and
// restores this edge's own revocations from the state directory.
func New(cfg *conf.Auth, o Options) (*Tokens, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Tokens{log: o.Log, stateDir: o.StateDir, now: o.Now, providers: map[string]*provider{}}
	if err := t.setConfig(cfg, nil); err != nil {
		return nil, err
	}
	if err := t.restore(); err != nil {
		return nil, err
	}
	return t, nil
}

// Next is a file's token settings built and not yet in force: a reload
// builds its pools with Next.PoolAuth and commits it only once they all
// built, so a refused reload changes nothing.
type Next struct {
	t         *Tokens
	cfg       conf.Auth
	providers map[string]*provider
	file      []auth.Revocation
}

// setConfig builds cfg and puts it in force at once (New).
func (t *Tokens) setConfig(cfg *conf.Auth, old map[string]*provider) error {
	n, err := t.build(cfg, old)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.cfg, t.providers, t.file = n.cfg, n.providers, n.file
	t.mu.Unlock()
	return nil
}

// build builds the providers of cfg, keeping those of old whose settings
// did not change (their keys and refresh go on), and the file's
// revocations, without putting them in force.
func (t *Tokens) build(cfg *conf.Auth, old map[string]*provider) (*Next, error) {
	ps := map[string]*provider{}
	var errs []error
	for _, pc := range cfg.Providers {
		o := old[pc.Name]
		if o != nil && reflect.DeepEqual(o.conf, pc) {
			ps[pc.Name] = o
			continue
		}
		var keep *provider
		if o != nil && sameKeys(o.conf, pc) {
			// Rules changed, keys did not: the source and its keys go on,
			// so a reload while the key server is down refuses nothing.
			keep = o
		}
		p, err := t.newProvider(pc, keep)
		if err != nil {
			errs = append(errs, fmt.Errorf("auth provider %s: %w", pc.Name, err))
			continue
		}
		ps[pc.Name] = p
	}
	file, err := fileRevocations(cfg, t.now())
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Next{t: t, cfg: *cfg, providers: ps, file: file}, nil
}

// sameKeys reports whether two settings of a provider take its keys
// from the same place, the same way.
func sameKeys(a, b conf.AuthProvider) bool {
	return a.JWKSFile == b.JWKSFile && a.JWKSURL == b.JWKSURL && a.Discovery == b.Discovery &&
		a.Issuer == b.Issuer && a.CAFile == b.CAFile && a.Refresh == b.Refresh
}

// newProvider builds pc; with keep, it takes keep's key source (and its
// refresh) instead of a new one.
func (t *Tokens) newProvider(pc conf.AuthProvider, keep *provider) (*provider, error) {
	if keep != nil {
		rules := rulesOf(pc, keep.source)
		if _, err := auth.NewVerifier(rules); err != nil {
			return nil, err
		}
		return &provider{conf: pc, rules: rules, source: keep.source, stop: keep.stop}, nil
	}
	client, err := httpClient(pc.CAFile)
	if err != nil {
		return nil, err
	}
	so := auth.SourceOptions{Name: pc.Name, File: pc.JWKSFile, URL: pc.JWKSURL, Client: client,
		Refresh: pc.Refresh.Std(), Log: t.log.With("provider", pc.Name), Now: t.now}
	if pc.Discovery {
		so.Discovery = pc.Issuer
	}
	src, err := auth.NewSource(so)
	if err != nil {
		return nil, err
	}
	rules := rulesOf(pc, src)
	if _, err := auth.NewVerifier(rules); err != nil {
		return nil, err
	}
	return &provider{conf: pc, rules: rules, source: src}, nil
}

// rulesOf is pc's verification rules over the keys of src.
func rulesOf(pc conf.AuthProvider, src *auth.Source) *auth.Provider {
	return &auth.Provider{Name: pc.Name, Issuer: pc.Issuer, Audiences: pc.Audiences,
		Algorithms: pc.Algorithms, Leeway: pc.Leeway.Std(), Required: pc.RequiredClaims, Keys: src,
		MaxLifetime: pc.MaxLifetime.Std()}
}

// httpClient is the client of a key source: its own roots when the
// provider names a CA file, a bounded time for every fetch.
func httpClient(caFile string) (*http.Client, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	if caFile == "" {
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ca_file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_file %s: no certificate", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	c.Transport = tr
	return c, nil
}

// fileRevocations maps the file's revocations; an entry without until is
// kept for the largest max_lifetime from now.
func fileRevocations(cfg *conf.Auth, now time.Time) ([]auth.Revocation, error) {
	var out []auth.Revocation
	for i, r := range cfg.Revoked {
		e := auth.Revocation{Issuer: r.Issuer, Subject: r.Subject, ID: r.ID, Until: now.Add(cfg.MaxTokenLifetime())}
		var err error
		if r.Before != "" {
			e.Before, err = time.Parse(time.RFC3339, r.Before)
		}
		if err == nil && r.Until != "" {
			e.Until, err = time.Parse(time.RFC3339, r.Until)
		}
		if err == nil {
			err = e.Validate()
		}
		if err != nil {
			return nil, fmt.Errorf("auth.revoked[%d]: %w", i, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Load fetches every provider's keys once; a provider whose keys cannot
// be had is reported (its pools refuse every token until they can) and
// the others go on.
func (t *Tokens) Load(ctx context.Context) error {
	var errs []error
	for _, p := range t.list() {
		if p.source.Keys() != nil {
			continue
		}
		if err := p.source.Load(ctx); err != nil {
			errs = append(errs, fmt.Errorf("auth provider %s: %w", p.conf.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (t *Tokens) list() []*provider {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*provider, 0, len(t.providers))
	for _, p := range t.providers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *provider) int {
		if a.conf.Name < b.conf.Name {
			return -1
		}
		return 1
	})
	return out
}

// Prepare builds a new file's settings for a reload: providers whose
// settings changed are built anew and their keys fetched (a provider
// whose keys cannot be had yet is logged: its pools refuse tokens until
// they can), the others keep theirs. Nothing is in force until Commit.
func (t *Tokens) Prepare(ctx context.Context, cfg *conf.Auth) (*Next, error) {
	t.mu.Lock()
	old := t.providers
	t.mu.Unlock()
	n, err := t.build(cfg, old)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range n.providers {
		if p.source.Keys() == nil {
			if err := p.source.Load(ctx); err != nil {
				errs = append(errs, fmt.Errorf("auth provider %s: %w", p.conf.Name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.log.Warn("auth: keys not loaded", "err", err)
	}
	return n, nil
}

// PoolAuth is a pool's policy under the prepared settings.
func (n *Next) PoolAuth(a conf.PoolAuth) (*proxy.Auth, error) { return poolAuth(n.providers, a) }

// Commit puts the prepared settings in force: the replaced providers'
// refreshes stop, the new ones' start, the file's revocations replace
// the old file's.
func (n *Next) Commit() {
	t := n.t
	t.mu.Lock()
	old := t.providers
	t.cfg, t.providers, t.file = n.cfg, n.providers, n.file
	inUse := map[*auth.Source]bool{}
	for _, p := range t.providers {
		inUse[p.source] = true
	}
	for _, p := range old {
		if !inUse[p.source] && p.stop != nil {
			p.stop()
		}
	}
	t.startLocked()
	t.mu.Unlock()
	t.publish()
}

// Run refreshes every provider's keys and recompiles the revocations
// once a minute, so that entries past their until are forgotten, until
// ctx ends.
func (t *Tokens) Run(ctx context.Context) error {
	t.mu.Lock()
	t.ctx = ctx
	t.startLocked()
	t.mu.Unlock()
	t.publish()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			t.publish()
		}
	}
}

// startLocked starts the refresh of each provider not running yet.
func (t *Tokens) startLocked() {
	if t.ctx == nil {
		return
	}
	for _, p := range t.providers {
		if p.stop != nil {
			continue
		}
		ctx, cancel := context.WithCancel(t.ctx)
		p.stop = cancel
		go p.source.Run(ctx)
	}
}

// PoolAuth is a pool's policy for the proxy; nil when its mode is off.
func (t *Tokens) PoolAuth(a conf.PoolAuth) (*proxy.Auth, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return poolAuth(t.providers, a)
}

// poolAuth maps a pool's policy with the verifier of the providers it
// names among providers.
func poolAuth(providers map[string]*provider, a conf.PoolAuth) (*proxy.Auth, error) {
	if a.Mode == conf.AuthOff || a.Mode == "" {
		return nil, nil
	}
	names := a.Providers
	if len(names) == 0 {
		for n := range providers {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	var rules []*auth.Provider
	lifetime := time.Duration(0)
	for _, n := range names {
		p := providers[n]
		if p == nil {
			return nil, fmt.Errorf("auth: no provider %q", n)
		}
		rules = append(rules, p.rules)
		lifetime = max(lifetime, p.conf.MaxLifetime.Std())
	}
	v, err := auth.NewVerifier(rules...)
	if err != nil {
		return nil, err
	}
	pa := &proxy.Auth{Verifier: v, Optional: a.Mode == conf.AuthOptional, ForwardToken: a.ForwardToken,
		MaxLifetime: lifetime, CloseCode: a.CloseCode, Grace: a.Grace.Std(), Spread: a.Spread.Std(),
		MaxConnsPerSubject: a.MaxConnectionsPerSubject, LogSubject: a.LogSubject == "plain"}
	for _, f := range a.From {
		pa.From = append(pa.From, tokenSource(f))
	}
	for _, h := range a.ClaimHeaders {
		pa.Claims = append(pa.Claims, proxy.ClaimHeader{Claim: h.Claim, Header: h.Header})
	}
	for _, r := range a.Allow {
		pa.Allow = append(pa.Allow, proxy.ClaimRule{Claim: r.Claim, Values: r.Values})
	}
	return pa, nil
}

func tokenSource(f conf.TokenFrom) proxy.TokenSource {
	switch {
	case f.Cookie != "":
		return proxy.TokenSource{Kind: proxy.TokenCookie, Name: f.Cookie}
	case f.Protocol != "":
		return proxy.TokenSource{Kind: proxy.TokenProtocol, Name: f.Protocol}
	case f.Query != "":
		return proxy.TokenSource{Kind: proxy.TokenQuery, Name: f.Query}
	}
	return proxy.TokenSource{Kind: proxy.TokenHeader, Name: f.Header}
}

// SetTarget sets what enforces the revocations and hands it the set in
// force.
func (t *Tokens) SetTarget(target Target) {
	t.mu.Lock()
	t.target = target
	t.mu.Unlock()
	t.publish()
}

// SetFleetStore sets where revocations of fleet scope are stored.
func (t *Tokens) SetFleetStore(s FleetStore) {
	t.mu.Lock()
	t.store = s
	t.mu.Unlock()
}

// SetFleet replaces the revocations of fleet scope (fleet.Revocations'
// target).
func (t *Tokens) SetFleet(rs []auth.Revocation) {
	t.mu.Lock()
	t.fleet = slices.Clone(rs)
	t.mu.Unlock()
	t.publish()
}

// untilMargin is added to the largest max_lifetime for a revocation's
// default until: more than the largest leeway (5m).
const untilMargin = 10 * time.Minute

// MaxUntil is how far a revocation's until may be: the largest
// max_lifetime and the margin; a later one is refused as from no
// operator (fleet.Revocations' bound on what it reads).
func MaxUntil(cfg *conf.Auth) time.Duration { return cfg.MaxTokenLifetime() + untilMargin + time.Hour }

// ErrInvalid is Revoke's error for a revocation that names nothing or is
// out of bounds.
var ErrInvalid = errors.New("revocation refused")

// ErrNoFleet is Revoke's error for scope fleet on an edge without one.
var ErrNoFleet = errors.New("no fleet: consul.fleet.prefix is not set")

// Revoke adds a revocation: of this edge alone (saved in the state
// directory) or of the fleet (stored in Consul, from where every edge,
// this one included, takes it). An entry without Until is kept for the
// largest max_lifetime. It returns the entry as stored.
func (t *Tokens) Revoke(ctx context.Context, r auth.Revocation, fleetScope bool) (auth.Revocation, error) {
	t.mu.Lock()
	if r.Until.IsZero() {
		// Every token accepted now expires before this: its exp is within
		// max_lifetime of its iat, and its iat within the leeway of now.
		r.Until = t.now().Add(t.cfg.MaxTokenLifetime() + untilMargin)
	}
	store := t.store
	t.mu.Unlock()
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := r.Bounded(t.now(), MaxUntil(&t.cfg)); err != nil {
		return r, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if fleetScope {
		if store == nil {
			return r, ErrNoFleet
		}
		if err := store.Put(ctx, r); err != nil {
			return r, err
		}
		// Enforced here at once; the fleet's copy follows through Consul.
		t.mu.Lock()
		t.fleet = append(t.fleet, r)
		t.mu.Unlock()
		t.publish()
		return r, nil
	}
	t.mu.Lock()
	if len(t.local) >= MaxLocal {
		t.mu.Unlock()
		return r, fmt.Errorf("already %d revocations of this edge", MaxLocal)
	}
	t.local = append(t.local, r)
	t.mu.Unlock()
	t.publish()
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	return r, t.save()
}

// MaxLocal bounds the revocations of one edge's own.
const MaxLocal = 10000

// publish compiles the revocations in force and hands them to the
// target; the local ones past their until are dropped.
func (t *Tokens) publish() {
	// One publish at a time, compile to save: a set compiled earlier must
	// not reach the proxy or the state file after a later one.
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	t.mu.Lock()
	now := t.now()
	n := len(t.local)
	t.local = slices.DeleteFunc(t.local, func(r auth.Revocation) bool { return !r.Until.After(now) })
	dropped := n != len(t.local)
	var issuers []string
	for _, p := range t.providers {
		issuers = append(issuers, p.conf.Issuer)
	}
	all := slices.Concat(t.file, t.local, t.fleet)
	r := auth.CompileRevocations(all, issuers, now)
	t.compiled = r
	target := t.target
	t.mu.Unlock()
	if dropped {
		if err := t.save(); err != nil {
			t.log.Warn("auth: revocations not saved", "err", err)
		}
	}
	if target == nil {
		return
	}
	if n := target.SetRevoked(r); n > 0 {
		t.mu.Lock()
		t.closed += uint64(n)
		t.mu.Unlock()
		t.log.Info("auth: closing connections whose tokens were revoked", "connections", n)
	}
}

// savedRevocations is the state file of this edge's own revocations.
type savedRevocations struct {
	Version int               `json:"version"`
	Entries []auth.Revocation `json:"entries"`
}

func (t *Tokens) statePath() string {
	if t.stateDir == "" {
		return ""
	}
	return filepath.Join(t.stateDir, "revocations.json")
}

func (t *Tokens) save() error {
	path := t.statePath()
	if path == "" {
		return nil
	}
	t.mu.Lock()
	data, err := json.Marshal(savedRevocations{Version: 1, Entries: t.local})
	t.mu.Unlock()
	if err != nil {
		return err
	}
	if err := trust.WriteFile(path, data); err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	return nil
}

// maxStateBytes bounds the state file: MaxLocal entries of bounded size.
const maxStateBytes = 16 << 20

func (t *Tokens) restore() error {
	path := t.statePath()
	if path == "" {
		return nil
	}
	data, err := trust.ReadFile(path, trust.State, maxStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("revocations state file %s: %w", path, err)
	}
	var s savedRevocations
	if err := json.Unmarshal(data, &s); err != nil || s.Version != 1 {
		return fmt.Errorf("revocations state file %s: not a version 1 file: %v", path, err)
	}
	for _, r := range s.Entries {
		if r.Validate() == nil && len(t.local) < MaxLocal {
			t.local = append(t.local, r)
		}
	}
	return nil
}

// Status is the component's state for /status and the metrics.
type Status struct {
	Providers []ProviderStatus `json:"providers"`
	// Revocations in force by scope (file, local, fleet), and the live
	// connections closed because of them since start.
	Revocations map[string]int `json:"revocations"`
	Closed      uint64         `json:"closed"`
}

// ProviderStatus is one provider's keys.
type ProviderStatus struct {
	Name   string            `json:"name"`
	Issuer string            `json:"issuer"`
	Keys   auth.SourceStatus `json:"keys"`
}

// Status returns the component's state.
func (t *Tokens) Status() Status {
	ps := t.list()
	t.mu.Lock()
	now := t.now()
	in := func(rs []auth.Revocation) int {
		n := 0
		for _, r := range rs {
			if r.Until.After(now) {
				n++
			}
		}
		return n
	}
	st := Status{Revocations: map[string]int{"file": in(t.file), "local": in(t.local), "fleet": in(t.fleet)}, Closed: t.closed}
	t.mu.Unlock()
	for _, p := range ps {
		st.Providers = append(st.Providers, ProviderStatus{Name: p.conf.Name, Issuer: p.conf.Issuer, Keys: p.source.Status()})
	}
	return st
}

// Revocations lists the entries in force, for the admin API.
func (t *Tokens) Revocations() map[string][]auth.Revocation {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	keep := func(rs []auth.Revocation) []auth.Revocation {
		out := []auth.Revocation{}
		for _, r := range rs {
			if r.Until.After(now) {
				out = append(out, r)
			}
		}
		return out
	}
	return map[string][]auth.Revocation{"file": keep(t.file), "local": keep(t.local), "fleet": keep(t.fleet)}
}

// Finding is a problem Check found with one provider.
type Finding struct {
	Provider int // index under auth.providers
	Err      error
}

// Check builds and loads every provider of cfg as startup does, for
// `edge -check`: a provider that cannot be built (a CA file that does not
// parse, a URL keys must not come from) or whose key file does not give a
// usable key set is an error; a key server that does not answer is a
// warning, since edge starts without its keys and takes them when it
// answers. Without fetch, only key files are read.
func Check(ctx context.Context, cfg *conf.Auth, fetch bool) (warnings, errs []Finding) {
	t := &Tokens{log: slog.New(slog.DiscardHandler), now: time.Now}
	for i, pc := range cfg.Providers {
		p, err := t.newProvider(pc, nil)
		if err != nil {
			errs = append(errs, Finding{i, err})
			continue
		}
		if pc.JWKSFile == "" && !fetch {
			continue
		}
		if err := p.source.Load(ctx); err != nil {
			if pc.JWKSFile != "" {
				errs = append(errs, Finding{i, err})
			} else {
				warnings = append(warnings, Finding{i, err})
			}
		}
	}
	return warnings, errs
}

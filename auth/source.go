package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SourceOptions configure a Source: exactly one of File, URL and
// Discovery.
type SourceOptions struct {
	// Name names the source in its status and logs.
	Name string
	// File is a local JWK Set, re-read at every refresh; the only place
	// an HS256 secret is taken from.
	File string
	// URL is a JWK Set over https (http only to a loopback host).
	URL string
	// Discovery is an issuer: its OpenID Connect discovery document
	// (Discovery + /.well-known/openid-configuration) names the set's URL
	// (jwks_uri), fetched at every refresh.
	Discovery string
	// Client fetches; nil: a client with a 10 s timeout.
	Client *http.Client
	// Refresh is how often the keys are fetched again; 0: 5 minutes.
	Refresh time.Duration
	// MinRefresh is the least time between two fetches that a kid edge
	// does not know brings forward; 0: 30 s.
	MinRefresh time.Duration
	Log        *slog.Logger
	Now        func() time.Time
}

// Source keeps a provider's keys, fetched in the background: Keys is one
// atomic load on the verification path; a refresh that fails keeps the
// last good keys and is retried with backoff; a token naming a kid the
// keys lack (a rotation edge has not seen yet) brings the next fetch
// forward, at most once per MinRefresh, and is refused meanwhile.
type Source struct {
	o     SourceOptions
	keys  atomic.Pointer[Keys]
	early chan struct{} // a Missing kid asks for a fetch

	mu     sync.Mutex
	status SourceStatus
	last   time.Time // the last fetch attempt
}

// SourceStatus is a source's state for /status and the metrics.
type SourceStatus struct {
	Name     string `json:"name,omitempty"`
	Location string `json:"location"`
	// Keys is the number of keys in force; Fetched when they were last
	// fetched successfully.
	Keys    int       `json:"keys"`
	Fetched time.Time `json:"fetched,omitzero"`
	// Failures counts failed fetches; Failing says the last one failed
	// (LastError why: the last good keys keep serving).
	Failures  uint64 `json:"failures"`
	LastError string `json:"last_error,omitempty"`
	Failing   bool   `json:"failing"`
}

// NewSource checks o and fills its defaults; nothing is fetched yet.
func NewSource(o SourceOptions) (*Source, error) {
	n := 0
	loc := ""
	for _, s := range []string{o.File, o.URL, o.Discovery} {
		if s != "" {
			n++
			loc = s
		}
	}
	if n != 1 {
		return nil, errors.New("auth: source: set exactly one of file, url and discovery")
	}
	for _, u := range []string{o.URL, o.Discovery} {
		if u != "" {
			if err := fetchableURL(u); err != nil {
				return nil, fmt.Errorf("auth: source %s: %w", o.Name, err)
			}
		}
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	// A redirect is followed only to where keys may come from: an https
	// key server must not hand edge over to plain http.
	c := *o.Client
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("more than 5 redirects")
		}
		return fetchableURL(req.URL.String())
	}
	o.Client = &c
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Minute
	}
	if o.MinRefresh <= 0 {
		o.MinRefresh = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Source{o: o, early: make(chan struct{}, 1), status: SourceStatus{Name: o.Name, Location: loc}}, nil
}

// fetchableURL refuses a URL keys must not come from: anything but https,
// or http to a host that is not loopback (whoever answers chooses who may
// connect).
func fetchableURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("%q is not an absolute URL", s)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http":
		h := u.Hostname()
		if ip := net.ParseIP(h); h == "localhost" || ip != nil && ip.IsLoopback() {
			return nil
		}
	}
	return fmt.Errorf("%q: keys come over https (http only from a loopback host)", s)
}

// Keys implements KeySource.
func (s *Source) Keys() *Keys { return s.keys.Load() }

// Missing implements KeySource: the next fetch comes early.
func (s *Source) Missing(string) {
	select {
	case s.early <- struct{}{}:
	default:
	}
}

// Status returns the source's state.
func (s *Source) Status() SourceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Keys = s.keys.Load().Len()
	return st
}

// Load fetches the keys once; on an error the keys in force stay.
func (s *Source) Load(ctx context.Context) error {
	s.mu.Lock()
	s.last = s.o.Now()
	s.mu.Unlock()
	ks, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.status.Failures++
		s.status.Failing, s.status.LastError = true, err.Error()
		return fmt.Errorf("auth: keys of %s: %w", s.o.Name, err)
	}
	s.keys.Store(ks)
	s.status.Fetched, s.status.Failing, s.status.LastError = s.o.Now(), false, ""
	return nil
}

// Run refreshes the keys until ctx ends: every Refresh, sooner after a
// Missing kid (no sooner than MinRefresh after the last fetch), and after
// a failure with a backoff from MinRefresh doubling up to Refresh.
func (s *Source) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		wait := s.o.Refresh
		if backoff > 0 {
			wait = backoff
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.early:
			t.Stop()
			if !s.sleepUntilAllowed(ctx) {
				return
			}
		}
		if err := s.Load(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, s.o.MinRefresh), s.o.Refresh)
			s.o.Log.Warn("auth: key refresh failed; the last good keys stay", "err", err)
			continue
		}
		backoff = 0
	}
}

// sleepUntilAllowed waits until MinRefresh has passed since the last
// fetch; false when ctx ended first.
func (s *Source) sleepUntilAllowed(ctx context.Context) bool {
	s.mu.Lock()
	d := s.last.Add(s.o.MinRefresh).Sub(s.o.Now())
	s.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fetch reads the key set from where the source says.
func (s *Source) fetch(ctx context.Context) (*Keys, error) {
	if s.o.File != "" {
		data, err := readBounded(s.o.File)
		if err != nil {
			return nil, err
		}
		return ParseJWKS(data, true)
	}
	u := s.o.URL
	if s.o.Discovery != "" {
		var err error
		if u, err = s.discover(ctx); err != nil {
			return nil, err
		}
	}
	data, err := s.get(ctx, u)
	if err != nil {
		return nil, err
	}
	return ParseJWKS(data, false)
}

// readBounded reads a local key file, at most MaxJWKSBytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxJWKSBytes+1))
	if err == nil && len(data) > MaxJWKSBytes {
		err = fmt.Errorf("%s: more than %d bytes", path, MaxJWKSBytes)
	}
	return data, err
}

// discover reads the issuer's discovery document (OpenID Connect
// Discovery 1.0 §4) and returns its jwks_uri; the document's issuer must
// be the one asked for (§4.3), and the URI one keys may come from.
func (s *Source) discover(ctx context.Context) (string, error) {
	doc, err := s.get(ctx, strings.TrimSuffix(s.o.Discovery, "/")+"/.well-known/openid-configuration")
	if err != nil {
		return "", err
	}
	var meta struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(doc, &meta); err != nil {
		return "", fmt.Errorf("discovery document: %w", err)
	}
	if meta.Issuer != s.o.Discovery {
		return "", fmt.Errorf("discovery document names issuer %q, not %q", meta.Issuer, s.o.Discovery)
	}
	if err := fetchableURL(meta.JWKSURI); err != nil {
		return "", fmt.Errorf("discovery document's jwks_uri: %w", err)
	}
	return meta.JWKSURI, nil
}

// get fetches u, at most MaxJWKSBytes, expecting 200.
func (s *Source) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(data) > MaxJWKSBytes {
		return nil, fmt.Errorf("GET %s: more than %d bytes", u, MaxJWKSBytes)
	}
	return data, nil
}

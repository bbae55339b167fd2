package consul

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// ClientOptions are explicit Consul client settings. Empty fields keep what
// api.DefaultConfig read from the environment (CONSUL_HTTP_ADDR,
// CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_CACERT, CONSUL_CLIENT_CERT,
// CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME, CONSUL_HTTP_SSL...).
type ClientOptions struct {
	// Address is host:port, or a URL with scheme http, https or unix.
	Address string
	// Token is an ACL token. Never logged.
	Token string
	// TokenFile holds the ACL token; read once by api.NewClient. Setting
	// both Token and TokenFile is an error.
	TokenFile string
	// Datacenter is the default datacenter of requests.
	Datacenter string
	// CAFile, CertFile, KeyFile and TLSServerName configure TLS to Consul.
	// With CAFile or CertFile and an Address without scheme, the scheme
	// becomes https.
	CAFile, CertFile, KeyFile, TLSServerName string
	// WaitTime is the client's default blocking-query wait.
	WaitTime time.Duration
	// MaxResponseBytes, when above 0, bounds the body of every answer: a
	// longer one fails its request (ErrResponseTooLarge) before it is
	// decoded, so whoever writes a KV prefix this client lists cannot make
	// edge read without bound. The readers of this package bound their
	// own requests tighter still (withResponseLimit), whatever this says.
	MaxResponseBytes int64
}

// ErrResponseTooLarge fails a request whose answer is longer than
// ClientOptions.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("consul answer larger than the client's bound")

// NewClient builds a Consul API client from api.DefaultConfig (the
// environment) overridden by the explicit settings in opts. Errors never
// contain the token.
func NewClient(opts ClientOptions) (*api.Client, error) {
	if opts.Token != "" && opts.TokenFile != "" {
		return nil, errors.New("consul client: set token or token_file, not both")
	}
	cfg := api.DefaultConfig()
	if opts.Address != "" {
		cfg.Address = opts.Address
	}
	switch {
	case opts.Token != "":
		cfg.Token, cfg.TokenFile = opts.Token, ""
	case opts.TokenFile != "":
		// An explicit file beats a token from the environment; api.NewClient
		// reads the file only when Token is empty.
		cfg.Token, cfg.TokenFile = "", opts.TokenFile
	}
	if opts.Datacenter != "" {
		cfg.Datacenter = opts.Datacenter
	}
	clientTLS(cfg, opts)
	if (opts.CAFile != "" || opts.CertFile != "") && cfg.Scheme == "http" && opts.Address != "" && !strings.Contains(opts.Address, "://") {
		// A CA or client certificate only makes sense over TLS.
		cfg.Scheme = "https"
	}
	if opts.WaitTime > 0 {
		cfg.WaitTime = opts.WaitTime
	}
	if err := boundClient(cfg, opts.MaxResponseBytes); err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", cfg.Address, err)
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		// api errors name files and addresses, never the token.
		return nil, fmt.Errorf("consul client for %s: %w", cfg.Address, err)
	}
	return c, nil
}

// clientTLS applies the TLS settings of opts to cfg.
func clientTLS(cfg *api.Config, opts ClientOptions) {
	if opts.CAFile != "" {
		cfg.TLSConfig.CAFile = opts.CAFile
	}
	if opts.CertFile != "" {
		cfg.TLSConfig.CertFile = opts.CertFile
	}
	if opts.KeyFile != "" {
		cfg.TLSConfig.KeyFile = opts.KeyFile
	}
	if opts.TLSServerName != "" {
		cfg.TLSConfig.Address = opts.TLSServerName
	}
}

// boundClient gives cfg an HTTP client whose answers are bounded: at max
// bytes when max > 0, and always at the bound a request's context carries
// (withResponseLimit). A unix:// address is dialled here, since
// api.NewClient would replace the HTTP client of one with its own.
func boundClient(cfg *api.Config, max int64) error {
	tr := cfg.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	if path, ok := strings.CutPrefix(cfg.Address, "unix://"); ok {
		tr = tr.Clone()
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		// Any host name will do: the socket is dialled whatever the URL.
		cfg.Address, cfg.Scheme = "consul.sock", "http"
	}
	hc, err := api.NewHttpClient(tr, cfg.TLSConfig)
	if err != nil {
		return err
	}
	hc.Transport = limitTransport{next: hc.Transport, max: max}
	cfg.HttpClient = hc
	return nil
}

// ResponseLimit is the bound of the answers of the requests made with a
// context from withResponseLimit.
type ResponseLimit struct {
	max     int64
	applied atomic.Bool // a limitTransport saw it
}

type responseLimitKey struct{}

// withResponseLimit returns ctx with a bound of max bytes on the body of
// every answer to a request made with it (the tighter of it and the
// client's MaxResponseBytes): a longer one fails its request with
// ErrResponseTooLarge after at most max+1 bytes were read, before any of
// it is decoded. Only a client made by NewClient applies it; the
// returned limit's check says whether it was.
func WithResponseLimit(ctx context.Context, max int64) (context.Context, *ResponseLimit) {
	l := &ResponseLimit{max: max}
	return context.WithValue(ctx, responseLimitKey{}, l), l
}

// Check fails when no request made with the limit's context went through
// a bounding transport: the client was not made by NewClient, so nothing
// it read was bounded, and its reader refuses to go on with it.
func (l *ResponseLimit) Check() error {
	if !l.applied.Load() {
		return errors.New("the consul client does not bound its answers (make it with consul.NewClient)")
	}
	return nil
}

// tooLargeIndex returns, for an error of a KV read refused by its bound,
// the index Consul's answer carried (X-Consul-Index: the entry's
// ModifyIndex for a read of one key), so the reader can tell without
// reading it again whether the entry changed since.
func TooLargeIndex(err error) (uint64, bool) {
	var e *tooLargeError
	if !errors.As(err, &e) || e.index == 0 {
		return 0, false
	}
	return e.index, true
}

// tooLargeError is ErrResponseTooLarge for one answer.
type tooLargeError struct {
	path  string
	max   int64
	index uint64
}

// Error implements error.
func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%s: more than %d bytes: %v", e.path, e.max, ErrResponseTooLarge)
}

// Is makes errors.Is(err, ErrResponseTooLarge) true.
func (e *tooLargeError) Is(target error) bool { return target == ErrResponseTooLarge }

// limitTransport bounds the bodies of the answers of next: at max when it
// is above 0, and at the bound of the request's context if that is
// tighter.
type limitTransport struct {
	next http.RoundTripper
	max  int64
}

// RoundTrip implements http.RoundTripper.
func (t limitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	bound := t.max
	if l, ok := r.Context().Value(responseLimitKey{}).(*ResponseLimit); ok {
		l.applied.Store(true)
		if bound <= 0 || l.max < bound {
			bound = l.max
		}
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil || bound <= 0 {
		return resp, err
	}
	index, _ := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
	tooLarge := &tooLargeError{path: r.URL.Path, max: bound, index: index}
	if resp.ContentLength > bound {
		resp.Body.Close()
		return nil, tooLarge
	}
	resp.Body = &limitBody{ReadCloser: resp.Body, left: bound, err: tooLarge}
	return resp, nil
}

// limitBody fails a read past its bound with err.
type limitBody struct {
	io.ReadCloser
	left int64
	err  error
}

// Read implements io.Reader.
func (b *limitBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body that ends at the bound from a longer one.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, b.err
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

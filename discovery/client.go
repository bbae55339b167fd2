package discovery

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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
	// edge read without bound. Not applied on a unix:// address.
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
		return nil, errors.New("discovery: consul client: set token or token_file, not both")
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
	if opts.MaxResponseBytes > 0 && !strings.HasPrefix(cfg.Address, "unix://") {
		hc, err := api.NewHttpClient(cfg.Transport, cfg.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("discovery: consul client for %s: %w", cfg.Address, err)
		}
		hc.Transport = limitTransport{next: hc.Transport, max: opts.MaxResponseBytes}
		cfg.HttpClient = hc
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		// api errors name files and addresses, never the token.
		return nil, fmt.Errorf("discovery: consul client for %s: %w", cfg.Address, err)
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

// limitTransport bounds the bodies of the answers of next.
type limitTransport struct {
	next http.RoundTripper
	max  int64
}

// RoundTrip implements http.RoundTripper.
func (t limitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %d bytes: %w", r.URL.Path, resp.ContentLength, ErrResponseTooLarge)
	}
	resp.Body = &limitBody{ReadCloser: resp.Body, left: t.max}
	return resp, nil
}

// limitBody fails a read past its bound.
type limitBody struct {
	io.ReadCloser
	left int64
}

// Read implements io.Reader.
func (b *limitBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body that ends at the bound from a longer one.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, ErrResponseTooLarge
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

package discovery

import (
	"errors"
	"fmt"
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
}

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
	if (opts.CAFile != "" || opts.CertFile != "") && cfg.Scheme == "http" && opts.Address != "" && !strings.Contains(opts.Address, "://") {
		// A CA or client certificate only makes sense over TLS.
		cfg.Scheme = "https"
	}
	if opts.WaitTime > 0 {
		cfg.WaitTime = opts.WaitTime
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		// api errors name files and addresses, never the token.
		return nil, fmt.Errorf("discovery: consul client for %s: %w", cfg.Address, err)
	}
	return c, nil
}

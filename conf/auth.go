package conf

import (
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Token modes of a pool (PoolAuth.Mode).
const (
	AuthOff      = "off"      // no token is looked at
	AuthRequired = "required" // a valid token or 401 (403 when not allowed)
	AuthOptional = "optional" // no token passes without claims; an invalid one is refused
)

// Auth is the tokens edge verifies: the issuers it trusts and the
// revocations the file states. A pool uses them through its own auth
// section (PoolAuth).
type Auth struct {
	// Providers are the issuers of JSON Web Tokens edge accepts.
	Providers []AuthProvider `yaml:"providers"`
	// Revoked are revocations stated in the file, enforced like those of
	// the admin API.
	Revoked []Revocation `yaml:"revoked"`
}

// AuthProvider is one issuer of tokens and where its keys are: exactly
// one of JWKSFile, JWKSURL and Discovery.
type AuthProvider struct {
	// Name identifies the provider in pools, metrics and /status.
	Name string `yaml:"name"`
	// Issuer is the "iss" its tokens must carry, exactly. Required unless
	// it is the only provider.
	Issuer string `yaml:"issuer"`
	// Audiences: a token's "aud" must name one of them. Default none:
	// "aud" is not checked.
	Audiences []string `yaml:"audiences"`
	// Algorithms is the allow-list: RS256, ES256, EdDSA, HS256. Required;
	// "none" is never accepted, and a key is only used for its own
	// algorithm.
	Algorithms []string `yaml:"algorithms"`
	// Leeway is the clock skew allowed on exp, nbf and iat. Default 30s.
	Leeway Duration `yaml:"leeway" default:"30s"`
	// RequiredClaims must be present in every token ("exp" always is).
	RequiredClaims []string `yaml:"required_claims"`
	// JWKSFile is a local JSON Web Key Set, re-read every Refresh; the
	// only place an HS256 secret may come from.
	JWKSFile string `yaml:"jwks_file"`
	// JWKSURL is a JWK Set fetched over HTTPS (http only to a loopback
	// host) and refreshed every Refresh.
	JWKSURL string `yaml:"jwks_url"`
	// Discovery finds the key set through the issuer's OpenID Connect
	// discovery document (Issuer + /.well-known/openid-configuration).
	Discovery bool `yaml:"discovery"`
	// CAFile verifies the key server's certificate instead of the system
	// roots.
	CAFile string `yaml:"ca_file"`
	// Refresh is how often the keys are fetched again. Default 5m. A key
	// id edge does not know brings the next fetch forward (at most one
	// every 30s); a failed fetch keeps the keys edge has.
	Refresh Duration `yaml:"refresh" default:"5m"`
	// MaxLifetime refuses a token whose exp is more than this after its
	// iat (and a token without iat), so that a revocation is never needed
	// for longer. Default 24h.
	MaxLifetime Duration `yaml:"max_lifetime" default:"24h"`
}

// Revocation is one revocation stated in the file: every token of a
// subject, one token by its jti, or the tokens issued before a moment
// (alone or with a subject). Until, when the entry is forgotten, defaults
// to now plus the largest max_lifetime.
type Revocation struct {
	Issuer  string `yaml:"issuer"`
	Subject string `yaml:"subject"`
	ID      string `yaml:"jti"`
	// Before and Until are RFC 3339 times.
	Before string `yaml:"issued_before"`
	Until  string `yaml:"until"`
}

// PoolAuth is a pool's token policy.
type PoolAuth struct {
	// Mode is off, required or optional. Default off.
	Mode string `yaml:"mode" default:"off"`
	// Providers are the names of the providers whose tokens the pool
	// accepts. Default all.
	Providers []string `yaml:"providers"`
	// From lists where the token is looked for, in order. Default the
	// Authorization header ("Bearer <token>").
	From []TokenFrom `yaml:"from"`
	// ClaimHeaders forward claims to the backend as request headers; a
	// client's own copies of those headers are removed.
	ClaimHeaders []ClaimHeader `yaml:"claim_headers"`
	// Allow requires claims to hold one of the given values (403
	// otherwise).
	Allow []ClaimRule `yaml:"allow"`
	// ForwardToken passes the token on to the backend. Default false: the
	// token is removed from wherever it may be.
	ForwardToken bool `yaml:"forward_token"`
	// CloseCode is the close a connection gets when its token expires or
	// is revoked: 1008 (policy violation, the default), or an
	// application's own code, 4000 to 4999.
	CloseCode int `yaml:"close_code" default:"1008"`
	// Grace is how long a connection outlives its token's exp. Default 0s.
	Grace Duration `yaml:"grace"`
	// Spread spreads the closes of connections whose tokens expire
	// together evenly over this long after exp+grace. Default 30s.
	Spread Duration `yaml:"spread" default:"30s"`
	// MaxConnectionsPerSubject caps one subject's live WebSockets to the
	// pool (429 past it). Default 0, none.
	MaxConnectionsPerSubject int `yaml:"max_connections_per_subject"`
	// LogSubject is what the access log's "sub" holds: hash (the default:
	// the first 8 bytes of SHA-256 over issuer, NUL and subject, in hex;
	// the subject is personal data) or plain (the subject itself).
	LogSubject string `yaml:"log_subject" default:"hash"`
	// MaxConnectionsPerSubjectScope is local (on each edge) or fleet
	// (over every edge following consul.fleet.prefix). Default local.
	MaxConnectionsPerSubjectScope string `yaml:"max_connections_per_subject_scope" default:"local"`
}

// TokenFrom is one place a token may be: exactly one field set.
type TokenFrom struct {
	// Header is a request header holding "Bearer <token>".
	Header string `yaml:"header"`
	// Cookie is a cookie holding the token.
	Cookie string `yaml:"cookie"`
	// Protocol is the prefix of a Sec-WebSocket-Protocol entry holding
	// the token after it (for example
	// base64url.bearer.authorization.k8s.io.).
	Protocol string `yaml:"protocol"`
	// Query is a query parameter holding the token: opt-in, since URLs
	// reach browser history and logs before edge.
	Query string `yaml:"query"`
}

// ClaimHeader forwards one claim as a header.
type ClaimHeader struct {
	Claim  string `yaml:"claim"`
	Header string `yaml:"header"`
}

// ClaimRule requires a claim to hold one of Values.
type ClaimRule struct {
	Claim  string   `yaml:"claim"`
	Values []string `yaml:"values"`
}

// Algorithms edge verifies (RFC 7518 §3.1, RFC 8037 §3.1).
var tokenAlgorithms = []string{"RS256", "ES256", "EdDSA", "HS256"}

// MaxTokenLifetime is the largest max_lifetime of the file's providers
// (24h without any): how long a revocation must be kept.
func (a *Auth) MaxTokenLifetime() time.Duration {
	d := 24 * time.Hour
	for _, p := range a.Providers {
		d = max(d, p.MaxLifetime.Std())
	}
	return d
}

func (v *validator) auth(a *Auth) {
	names := map[string]bool{}
	issuers := map[string]bool{}
	for i := range a.Providers {
		p := &a.Providers[i]
		path := index("auth.providers", i)
		if p.Name == "" {
			v.errf(path+".name", "required")
		} else if v.name(path+".name", p.Name); names[p.Name] {
			v.errf(path+".name", "duplicate provider name %q", p.Name)
		}
		names[p.Name] = true
		if p.Issuer == "" && len(a.Providers) > 1 {
			v.errf(path+".issuer", "required when there is more than one provider")
		} else if issuers[p.Issuer] {
			v.errf(path+".issuer", "%q is the issuer of another provider", p.Issuer)
		}
		issuers[p.Issuer] = true
		v.authProvider(path, p)
	}
	for i, r := range a.Revoked {
		v.revocation(index("auth.revoked", i), r)
	}
}

func (v *validator) authProvider(path string, p *AuthProvider) {
	if len(p.Algorithms) == 0 {
		v.errf(path+".algorithms", "required: the algorithms the issuer signs with (%s)", strings.Join(tokenAlgorithms, ", "))
	}
	for i, alg := range p.Algorithms {
		if !slices.Contains(tokenAlgorithms, alg) {
			v.errf(index(path+".algorithms", i), "%q is not one of %s", alg, strings.Join(tokenAlgorithms, ", "))
		}
	}
	n := 0
	for _, set := range []bool{p.JWKSFile != "", p.JWKSURL != "", p.Discovery} {
		if set {
			n++
		}
	}
	if n != 1 {
		v.errf(path, "set exactly one of jwks_file, jwks_url and discovery")
	}
	if slices.Contains(p.Algorithms, "HS256") && p.JWKSFile == "" {
		v.errf(path+".algorithms", "HS256 keys are shared secrets: they come only from jwks_file, never over the network")
	}
	if p.JWKSFile != "" {
		v.secretFile(path+".jwks_file", p.JWKSFile, false)
	}
	if p.JWKSURL != "" {
		if msg := keyURL(p.JWKSURL); msg != "" {
			v.errf(path+".jwks_url", "%q %s", p.JWKSURL, msg)
		}
	}
	if p.Discovery {
		if msg := keyURL(p.Issuer); msg != "" {
			v.errf(path+".issuer", "discovery fetches from the issuer: %q %s", p.Issuer, msg)
		}
	}
	v.file(path+".ca_file", p.CAFile, false)
	v.duration(path+".leeway", p.Leeway, true)
	if p.Leeway.Std() > 5*time.Minute {
		v.errf(path+".leeway", "%s is longer than 5m", p.Leeway)
	}
	v.duration(path+".refresh", p.Refresh, false)
	if p.Refresh > 0 && p.Refresh.Std() < 30*time.Second {
		v.errf(path+".refresh", "%s is shorter than 30s", p.Refresh)
	}
	v.duration(path+".max_lifetime", p.MaxLifetime, false)
}

// keyURL says what is wrong with a URL keys are fetched from ("": fine):
// https, or http to a loopback host only, since whoever can change the
// answer chooses who may connect.
func keyURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "":
		return "is not an absolute URL"
	case u.Scheme == "https":
		return ""
	case u.Scheme != "http":
		return "is neither https nor http"
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return ""
	}
	return "is plain http to a host that is not loopback: anyone on the path could choose the keys"
}

func (v *validator) revocation(path string, r Revocation) {
	times := map[string]string{"issued_before": r.Before, "until": r.Until}
	for k, t := range times {
		if t == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339, t); err != nil {
			v.errf(path+"."+k, "%q is not an RFC 3339 time", t)
		}
	}
	switch {
	case r.ID != "" && (r.Subject != "" || r.Before != ""):
		v.errf(path, "jti names one token: give it alone")
	case r.ID == "" && r.Subject == "" && r.Before == "":
		v.errf(path, "names nothing: give subject, jti or issued_before")
	case r.ID == "" && r.Subject == "" && r.Issuer != "":
		v.errf(path+".issuer", "issued_before with an issuer is not supported: give it alone, or with a subject")
	}
}

func (v *validator) poolAuth(path string, p *Pool) {
	a := &p.Auth
	v.oneOf(path+".mode", a.Mode, AuthOff, AuthRequired, AuthOptional)
	if a.Mode == AuthOff || a.Mode == "" {
		return
	}
	if len(v.c.Auth.Providers) == 0 {
		v.errf(path+".mode", "%s needs a provider under auth.providers", a.Mode)
	}
	for i, name := range a.Providers {
		if !slices.ContainsFunc(v.c.Auth.Providers, func(q AuthProvider) bool { return q.Name == name }) {
			v.errf(index(path+".providers", i), "no provider %q under auth.providers", name)
		}
	}
	for i, f := range a.From {
		v.tokenFrom(index(path+".from", i), f, a.ForwardToken)
	}
	for i, h := range a.ClaimHeaders {
		v.claimHeader(index(path+".claim_headers", i), h)
	}
	for i, r := range a.Allow {
		if r.Claim == "" || len(r.Values) == 0 {
			v.errf(index(path+".allow", i), "needs a claim and at least one value")
		}
	}
	if c := a.CloseCode; c != 1008 && (c < 4000 || c > 4999) {
		v.errf(path+".close_code", "%d is neither 1008 nor an application code 4000..4999", c)
	}
	v.duration(path+".grace", a.Grace, true)
	v.duration(path+".spread", a.Spread, true)
	if n := a.MaxConnectionsPerSubject; n < 0 {
		v.errf(path+".max_connections_per_subject", "%d must not be negative", n)
	}
	v.oneOf(path+".log_subject", a.LogSubject, "hash", "plain")
	v.oneOf(path+".max_connections_per_subject_scope", a.MaxConnectionsPerSubjectScope, ScopeLocal, ScopeFleet)
	if a.MaxConnectionsPerSubjectScope == ScopeFleet && v.c.Consul.Fleet.Prefix == "" {
		v.errf(path+".max_connections_per_subject_scope", "fleet needs consul.fleet.prefix, where the edges publish their counts")
	}
}

func (v *validator) tokenFrom(path string, f TokenFrom, forward bool) {
	n := 0
	for _, s := range []string{f.Header, f.Cookie, f.Protocol, f.Query} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		v.errf(path, "set exactly one of header, cookie, protocol and query")
		return
	}
	switch {
	case f.Header != "" && !isToken(f.Header):
		v.errf(path+".header", "%q is not a header name", f.Header)
	case f.Cookie != "" && !isToken(f.Cookie):
		v.errf(path+".cookie", "%q is not a cookie name", f.Cookie)
	case f.Protocol != "" && !isToken(f.Protocol):
		v.errf(path+".protocol", "%q is not a subprotocol prefix", f.Protocol)
	case f.Query != "" && forward:
		// The backend would receive the token in its request line, which
		// every access log records.
		v.errf(path+".query", "forward_token would put the token in the backend's request line, and so in its access log")
	case f.Query != "":
		v.warnf(path+".query", "a token in the URL also reaches browser history and any log in front of edge")
	}
}

// claimHeader checks one claim forwarded as a header: never one that
// carries credentials or the WebSocket handshake.
func (v *validator) claimHeader(path string, h ClaimHeader) {
	if h.Claim == "" {
		v.errf(path+".claim", "required")
	}
	lower := strings.ReplaceAll(strings.ToLower(h.Header), "_", "-")
	switch {
	case !isToken(h.Header):
		v.errf(path+".header", "%q is not a header name", h.Header)
	case slices.Contains(reservedHeaders, lower) || strings.HasPrefix(lower, "sec-websocket-") ||
		strings.HasPrefix(lower, "x-forwarded-") || strings.HasPrefix(lower, "proxy-"):
		v.errf(path+".header", "%q is not a header a claim may replace: it carries credentials, framing or what edge itself sets", h.Header)
	}
}

// reservedHeaders are the headers a claim may not become: credentials,
// the message's framing and hop-by-hop fields (a claim's value could
// change how the backend reads the request), and those edge sets.
var reservedHeaders = []string{"authorization", "cookie", "host", "connection", "upgrade", "te", "trailer",
	"transfer-encoding", "content-length", "keep-alive", "forwarded", "x-real-ip", "x-request-id"}

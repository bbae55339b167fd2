package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Algorithms edge verifies (RFC 7518 §3.1; EdDSA: RFC 8037 §3.1).
const (
	RS256 = "RS256"
	ES256 = "ES256"
	EdDSA = "EdDSA"
	HS256 = "HS256"
)

// ValidAlgorithm reports whether name is one of the algorithms edge
// verifies; "none" never is.
func ValidAlgorithm(name string) bool {
	switch name {
	case RS256, ES256, EdDSA, HS256:
		return true
	}
	return false
}

// MaxTokenBytes bounds a token before anything of it is decoded: it comes
// from an anonymous client.
const MaxTokenBytes = 8192

// Why a token is refused. Every error Verify returns wraps one of them;
// none carries the token (a credential) in its text.
var (
	ErrMalformed     = errors.New("malformed token")
	ErrAlgorithm     = errors.New("algorithm not allowed")
	ErrUnknownIssuer = errors.New("unknown issuer")
	ErrUnknownKey    = errors.New("unknown key")
	ErrSignature     = errors.New("bad signature")
	ErrExpired       = errors.New("token expired")
	ErrNotYetValid   = errors.New("token not yet valid")
	ErrIssuer        = errors.New("wrong issuer")
	ErrAudience      = errors.New("wrong audience")
	ErrMissingClaim  = errors.New("missing claim")
)

var outcomes = []struct {
	err   error
	label string
}{
	{ErrMalformed, "malformed"}, {ErrAlgorithm, "algorithm"}, {ErrUnknownIssuer, "unknown_issuer"},
	{ErrUnknownKey, "unknown_key"}, {ErrSignature, "signature"}, {ErrExpired, "expired"},
	{ErrNotYetValid, "not_yet_valid"}, {ErrIssuer, "unknown_issuer"}, {ErrAudience, "audience"},
	{ErrMissingClaim, "missing_claim"},
}

// Outcome is the metric label of a verification's result: "ok" for nil,
// else one of Outcomes.
func Outcome(err error) string {
	if err == nil {
		return "ok"
	}
	for _, o := range outcomes {
		if errors.Is(err, o.err) {
			return o.label
		}
	}
	return "malformed"
}

// Outcomes lists every label Outcome returns for an error.
func Outcomes() []string {
	var out []string
	for _, o := range outcomes {
		if !slices.Contains(out, o.label) {
			out = append(out, o.label)
		}
	}
	return out
}

// Claims are the verified claims of one token.
type Claims struct {
	Issuer   string
	Subject  string
	Audience []string // "aud" as a string or an array (RFC 7519 §4.1.3)
	ID       string   // "jti"
	// IssuedAt, NotBefore and Expiry are zero when absent.
	IssuedAt, NotBefore, Expiry time.Time
	raw                         map[string]json.RawMessage
}

// Claim renders the named top-level claim for a header: a string as it
// is, a number or a boolean as its JSON text, an array of strings joined
// by ","; an object, null or an absent claim is not rendered (false).
func (c *Claims) Claim(name string) (string, bool) {
	v, ok := c.raw[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case '[':
		var ss []string
		if json.Unmarshal(v, &ss) != nil {
			return "", false
		}
		return strings.Join(ss, ","), true
	case '{', 'n':
		return "", false
	}
	return string(v), true
}

// Provider is one issuer's rules.
type Provider struct {
	Name string
	// Issuer is the "iss" its tokens must carry, exactly; "" accepts any,
	// and is only allowed for a verifier's only provider.
	Issuer string
	// Audiences: one must appear in "aud"; none: "aud" is not checked.
	Audiences []string
	// Algorithms is the allow-list; it may not be empty.
	Algorithms []string
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration
	// Required are claims that must be present ("exp" always is).
	Required []string
	// MaxLifetime is the longest a token of the provider may be valid
	// for, from its "iat" (0: not checked here; the proxy checks it, as
	// the bound on how long a revocation must be kept).
	MaxLifetime time.Duration
	// Keys is where its keys are.
	Keys KeySource
}

// KeySource gives a provider's current keys: a *Source, or StaticKeys.
type KeySource interface {
	// Keys returns the keys in force (nil: none yet).
	Keys() *Keys
	// Missing reports that a token named a kid Keys does not hold; a
	// refreshing source may bring its next fetch forward, never fetching
	// on the caller's goroutine.
	Missing(kid string)
}

// StaticKeys is a KeySource over fixed keys.
type StaticKeys struct{ K *Keys }

// Keys implements KeySource.
func (s StaticKeys) Keys() *Keys { return s.K }

// Missing implements KeySource.
func (StaticKeys) Missing(string) {}

// Verifier verifies tokens against one or more providers.
type Verifier struct {
	byIssuer map[string]*Provider
	any      *Provider // the only provider, with no issuer
}

// NewVerifier checks the providers (unique names and issuers, algorithms
// known and listed, at most one without an issuer and then alone) and
// returns their verifier.
func NewVerifier(providers ...*Provider) (*Verifier, error) {
	v := &Verifier{byIssuer: map[string]*Provider{}}
	names := map[string]bool{}
	for _, p := range providers {
		switch {
		case names[p.Name]:
			return nil, fmt.Errorf("auth: provider %q named twice", p.Name)
		case len(p.Algorithms) == 0:
			return nil, fmt.Errorf("auth: provider %q: no algorithm allowed", p.Name)
		case p.Keys == nil:
			return nil, fmt.Errorf("auth: provider %q: no keys", p.Name)
		case p.Issuer == "" && len(providers) > 1:
			return nil, fmt.Errorf("auth: provider %q: an issuer is required with more than one provider", p.Name)
		case v.byIssuer[p.Issuer] != nil:
			return nil, fmt.Errorf("auth: provider %q: issuer %q is another provider's", p.Name, p.Issuer)
		}
		for _, a := range p.Algorithms {
			if !ValidAlgorithm(a) {
				return nil, fmt.Errorf("auth: provider %q: algorithm %q is not one of RS256, ES256, EdDSA, HS256", p.Name, a)
			}
		}
		names[p.Name] = true
		if p.Issuer == "" {
			v.any = p
		}
		v.byIssuer[p.Issuer] = p
	}
	return v, nil
}

// header is the JOSE header (RFC 7515 §4.1) of a JWS.
type header struct {
	Alg  string          `json:"alg"`
	Kid  string          `json:"kid"`
	Crit json.RawMessage `json:"crit"`
}

// Verify checks a token in the JWS compact serialization (RFC 7515
// §7.1) at now: its provider by its issuer, the algorithm against the
// provider's allow-list and the key's own, the signature, then the
// claims (RFC 7519 §4.1: exp required, nbf, iat not in the future, iss,
// aud, the provider's required claims), each with the provider's leeway.
func (v *Verifier) Verify(token string, now time.Time) (*Claims, *Provider, error) {
	if len(token) > MaxTokenBytes {
		return nil, nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxTokenBytes)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, nil, fmt.Errorf("%w: not three parts", ErrMalformed)
	}
	var h header
	raw := map[string]json.RawMessage{}
	if err := decodeSegment(parts[0], &h); err != nil {
		return nil, nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	// The claims are read from this one map, by their exact names: a
	// second decode into a struct would match "SUB" for "sub" (encoding/json
	// folds case), and two readings of one token could disagree.
	if err := decodeSegment(parts[1], &raw); err != nil {
		return nil, nil, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	iss, err := stringClaim(raw, "iss")
	if err != nil {
		return nil, nil, err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: signature encoding", ErrMalformed)
	}
	p := v.byIssuer[iss]
	if p == nil {
		p = v.any
	}
	if p == nil {
		return nil, nil, ErrUnknownIssuer
	}
	if len(h.Crit) > 0 {
		// RFC 7515 §4.1.11: extensions a recipient does not understand
		// make the JWS invalid; edge understands none.
		return nil, p, fmt.Errorf("%w: provider %s: crit header", ErrMalformed, p.Name)
	}
	if !slices.Contains(p.Algorithms, h.Alg) || !ValidAlgorithm(h.Alg) {
		return nil, p, fmt.Errorf("%w: provider %s: %q", ErrAlgorithm, p.Name, h.Alg)
	}
	if err := checkSignature(p, h, parts[0]+"."+parts[1], sig); err != nil {
		return nil, p, err
	}
	c, err := claimsOf(raw)
	if err != nil {
		return nil, p, err
	}
	return c, p, checkClaims(p, c, now)
}

// decodeSegment decodes one base64url segment (RFC 7515 §2: no padding)
// holding a JSON object.
func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return errors.New("not base64url")
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return errors.New("not a JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// checkSignature finds the key and verifies sig over signed with it.
// Only a key whose own algorithm is the token's is tried: an RSA public
// key is never an HMAC secret (the algorithm confusion of
// CVE-2015-9235), nor an EC key an RSA one.
func checkSignature(p *Provider, h header, signed string, sig []byte) error {
	ks := p.Keys.Keys()
	if ks == nil {
		return fmt.Errorf("%w: provider %s has no keys yet", ErrUnknownKey, p.Name)
	}
	cands := ks.find(h.Kid, h.Alg)
	if len(cands) == 0 {
		if h.Kid != "" {
			p.Keys.Missing(h.Kid)
		}
		return fmt.Errorf("%w: provider %s, kid %q", ErrUnknownKey, p.Name, trimKid(h.Kid))
	}
	for _, k := range cands {
		if verifySig(k, h.Alg, []byte(signed), sig) {
			return nil
		}
	}
	return fmt.Errorf("%w: provider %s", ErrSignature, p.Name)
}

// trimKid bounds a kid in an error's text: it is the client's.
func trimKid(kid string) string {
	if len(kid) > 64 {
		return kid[:64] + "..."
	}
	return strconv.Quote(kid)[1 : len(strconv.Quote(kid))-1]
}

func verifySig(k *Key, alg string, signed, sig []byte) bool {
	sum := sha256.Sum256(signed)
	switch alg {
	case RS256:
		pub, ok := k.Public.(*rsa.PublicKey)
		return ok && rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) == nil
	case ES256:
		pub, ok := k.Public.(*ecdsa.PublicKey)
		if !ok || len(sig) != 64 {
			// RFC 7518 §3.4: R and S, 32 bytes each, not DER.
			return false
		}
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		return ecdsa.Verify(pub, sum[:], r, s)
	case EdDSA:
		pub, ok := k.Public.(ed25519.PublicKey)
		return ok && len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, signed, sig)
	case HS256:
		if len(k.Secret) == 0 {
			return false
		}
		m := hmac.New(sha256.New, k.Secret)
		m.Write(signed)
		return hmac.Equal(m.Sum(nil), sig)
	}
	return false
}

// stringClaim reads a claim that must be a string when present.
func stringClaim(raw map[string]json.RawMessage, name string) (string, error) {
	v, ok := raw[name]
	if !ok {
		return "", nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", fmt.Errorf("%w: %s is not a string", ErrMalformed, name)
	}
	return s, nil
}

// claimsOf reads the registered claims (RFC 7519 §4.1) from the payload's
// map, by their exact names.
func claimsOf(raw map[string]json.RawMessage) (*Claims, error) {
	c := &Claims{raw: raw}
	var err error
	for _, f := range []struct {
		name string
		dst  *string
	}{{"iss", &c.Issuer}, {"sub", &c.Subject}, {"jti", &c.ID}} {
		if *f.dst, err = stringClaim(raw, f.name); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"exp", &c.Expiry}, {"nbf", &c.NotBefore}, {"iat", &c.IssuedAt}} {
		v, ok := raw[f.name]
		if !ok {
			continue
		}
		var n json.Number
		if json.Unmarshal(v, &n) != nil {
			return nil, fmt.Errorf("%w: %s is not a number", ErrMalformed, f.name)
		}
		if *f.dst, err = numericDate(n); err != nil {
			return nil, err
		}
	}
	if v, ok := c.Values("aud"); ok {
		c.Audience = v
	} else if _, present := raw["aud"]; present {
		return nil, fmt.Errorf("%w: aud is neither a string nor an array of strings", ErrMalformed)
	}
	return c, nil
}

// Values is a claim that is a string or an array of strings, as its
// values (false otherwise): what a rule compares, element by element,
// never a joined string a comma inside one value could split.
func (c *Claims) Values(name string) ([]string, bool) {
	v, ok := c.raw[name]
	if !ok {
		return nil, false
	}
	var one string
	if json.Unmarshal(v, &one) == nil {
		return []string{one}, true
	}
	var many []string
	if json.Unmarshal(v, &many) == nil {
		return many, true
	}
	return nil, false
}

// numericDate reads a NumericDate (RFC 7519 §2: seconds, possibly
// fractional), bounded so that no arithmetic on it overflows.
func numericDate(n json.Number) (time.Time, error) {
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || f < 0 || f > 1<<40 {
		return time.Time{}, fmt.Errorf("%w: a date is not a number of seconds", ErrMalformed)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

// checkClaims checks c against p at now.
func checkClaims(p *Provider, c *Claims, now time.Time) error {
	switch {
	case c.Expiry.IsZero():
		// A token without exp never expires; edge holds connections for
		// the token's life, so it needs one.
		return fmt.Errorf("%w: exp", ErrMissingClaim)
	case !now.Before(c.Expiry.Add(p.Leeway)):
		return ErrExpired
	case !c.NotBefore.IsZero() && now.Add(p.Leeway).Before(c.NotBefore):
		return ErrNotYetValid
	case !c.IssuedAt.IsZero() && now.Add(p.Leeway).Before(c.IssuedAt):
		return fmt.Errorf("%w: issued in the future", ErrNotYetValid)
	case p.Issuer != "" && c.Issuer != p.Issuer:
		return ErrIssuer
	case len(p.Audiences) > 0 && !slices.ContainsFunc(c.Audience, func(a string) bool { return slices.Contains(p.Audiences, a) }):
		return ErrAudience
	}
	for _, name := range p.Required {
		if _, ok := c.raw[name]; !ok {
			return fmt.Errorf("%w: %s", ErrMissingClaim, name)
		}
	}
	return nil
}

package proxy

import (
	"cmp"
	"encoding/base64"
	"math"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/auth"
)

// Auth is a pool's token policy: who may connect, what the backend
// learns of them, and how long their connection may live. A nil *Auth is
// off. The token is checked after the upgrade's own checks and before
// admission and any dial: a refusal (401 for a missing, invalid, expired
// or revoked token, 403 for a valid one the pool does not allow, 429 for
// a subject over its connection limit) reaches no backend. Checking
// before admission keeps tokenless clients from spending the pool's
// admission rate; the verification it costs a hostile client (tens of
// microseconds) is a fraction of the TLS handshake that client already
// made edge pay.
type Auth struct {
	// Verifier checks a token's signature and claims (auth.Verifier).
	Verifier TokenVerifier
	// Optional admits a request without a token (its backend learns no
	// claims); a token that is present must still be valid.
	Optional bool
	// From lists where the token may be, tried in order; the first place
	// that holds one is used. Every place listed is removed from what
	// the backend receives unless ForwardToken.
	From []TokenSource
	// Claims are the claims forwarded as request headers. A client's own
	// copy of each header, in any spelling, is removed first.
	Claims []ClaimHeader
	// Allow lists claims a token must carry with one of the given values
	// (403 otherwise): a string claim equal to one, or an array claim
	// holding one.
	Allow []ClaimRule
	// ForwardToken passes the token on to the backend where it came.
	ForwardToken bool
	// MaxLifetime refuses a token that is valid for longer than this from
	// now (0: 24h): a revocation is kept for that long at most.
	MaxLifetime time.Duration
	// CloseCode is the close a connection gets when its token expires or
	// is revoked (0: 1008, policy violation; 4000-4999 for an
	// application's own).
	CloseCode int
	// Grace is how long a connection outlives its token's "exp".
	Grace time.Duration
	// Spread spreads the closes of connections whose tokens expire
	// together over this long after exp+Grace, evenly, so that tokens
	// minted together do not expire into a reconnect storm (0: 30s).
	Spread time.Duration
	// MaxConnsPerSubject caps one subject's live connections to the pool
	// on this edge (0: none); over it, 429.
	MaxConnsPerSubject int
	// LogSubject logs the subject itself as the access line's "sub",
	// where the default logs its hash (auth.SubjectHash): the subject is
	// personal data, and a connection keeps it only when asked (one
	// string per subject held, shared by its connections).
	LogSubject bool
}

// TokenVerifier verifies a token; *auth.Verifier is one.
type TokenVerifier interface {
	Verify(token string, now time.Time) (*auth.Claims, *auth.Provider, error)
}

// TokenSource is one place a token may be in a request.
type TokenSource struct {
	// Kind is TokenHeader (Name: a header, default Authorization; a
	// value "Bearer <token>", RFC 6750 §2.1), TokenCookie (Name: the
	// cookie), TokenProtocol (Name: the prefix of a Sec-WebSocket-Protocol
	// entry, the token after it: browsers cannot set headers on a
	// WebSocket) or TokenQuery (Name: the query parameter; the query is
	// rewritten without it, but a token in a URL also reaches browser
	// history and any log that records URLs before edge).
	Kind TokenKind
	Name string
}

// TokenKind is where a TokenSource looks.
type TokenKind uint8

// Token source kinds.
const (
	TokenHeader TokenKind = iota
	TokenCookie
	TokenProtocol
	TokenQuery
)

// ClaimHeader forwards one claim as a request header.
type ClaimHeader struct {
	Claim, Header string
}

// ClaimRule requires a claim to hold one of Values.
type ClaimRule struct {
	Claim  string
	Values []string
}

// Refusal reasons of the token check: the access log's reason and
// Observer.Rejected's, and Observer.TokenChecked's outcomes besides
// auth.Outcomes.
const (
	reasonTokenMissing   = "token_missing"
	reasonTokenInvalid   = "token_invalid"
	reasonTokenRevoked   = "token_revoked"
	reasonTokenLifetime  = "token_lifetime"
	reasonTokenForbidden = "token_forbidden"
	reasonSubjectConns   = "subject_max_conns"
)

// Close reasons of a connection whose token ended.
const (
	ReasonTokenExpired CloseReason = "token_expired" // its token's exp (plus grace and spread) passed
	ReasonTokenRevoked CloseReason = "token_revoked" // a revocation named its token
)

// compiledAuth is Auth with its defaults settled (compilePool).
type compiledAuth struct {
	Auth
	closeCode int
	stripped  []string // the claim headers, removed from the client's request
}

func compileAuth(a *Auth) *compiledAuth {
	if a == nil {
		return nil
	}
	c := &compiledAuth{Auth: *a, closeCode: a.CloseCode}
	if c.closeCode == 0 {
		c.closeCode = ClosePolicyViolation
	}
	if c.MaxLifetime <= 0 {
		c.MaxLifetime = 24 * time.Hour
	}
	if c.Spread <= 0 {
		c.Spread = 30 * time.Second
	}
	for _, h := range a.Claims {
		c.stripped = append(c.stripped, h.Header)
	}
	if len(c.From) == 0 {
		c.From = []TokenSource{{Kind: TokenHeader}}
	}
	return c
}

// ClosePolicyViolation is close code 1008 (RFC 6455 §7.4.1).
const ClosePolicyViolation = 1008

// bearerResult is what checkToken decided for one request.
type bearerResult struct {
	mark    *auth.Mark // nil: no token (optional pool)
	expires time.Time  // the token's exp
	// protocol is the Sec-WebSocket-Protocol entry that carried the
	// token when it was the only one offered: the 101 names it.
	protocol string
	status   int // 0: admitted
	reason   string
	// subject is the token's subject when the pool logs it; "" otherwise.
	subject string
}

// checkToken verifies r's token for the pool's policy at now, and on
// success rewrites r for the backend: the token removed from every place
// it may be (unless forwarded), the client's copies of the claim headers
// removed, and the claims set.
func (s *Server) checkToken(r *http.Request, a *compiledAuth, pool string, now time.Time) bearerResult {
	tok := findToken(r, a.From)
	protocol := tokenProtocol(r.Header["Sec-Websocket-Protocol"], a)
	if !a.ForwardToken {
		stripToken(r, a.From)
	}
	for _, h := range a.stripped {
		for k := range r.Header {
			if foldsTo(k, h) {
				delete(r.Header, k)
			}
		}
	}
	if tok == "" {
		if a.Optional {
			return bearerResult{}
		}
		s.obs.TokenChecked(pool, reasonTokenMissing)
		return bearerResult{status: http.StatusUnauthorized, reason: reasonTokenMissing}
	}
	claims, p, err := a.Verifier.Verify(tok, now)
	if err != nil {
		s.obs.TokenChecked(pool, auth.Outcome(err))
		return bearerResult{status: http.StatusUnauthorized, reason: reasonTokenInvalid}
	}
	res := bearerResult{expires: claims.Expiry, status: http.StatusUnauthorized}
	m := auth.MarkOf(claims, p)
	switch {
	case tooLong(claims, p, a.MaxLifetime):
		res.reason = reasonTokenLifetime
	case s.revoked.Load().Revoked(m):
		res.reason = reasonTokenRevoked
	case !allowed(claims, a.Allow):
		res.status, res.reason = http.StatusForbidden, reasonTokenForbidden
	default:
		res.status = 0
	}
	if res.status != 0 {
		s.obs.TokenChecked(pool, res.reason)
		return res
	}
	s.obs.TokenChecked(pool, "ok")
	for _, h := range a.Claims {
		if v, ok := claims.Claim(h.Claim); ok && validHeaderValue(v) {
			r.Header.Set(h.Header, v)
		}
	}
	res.mark = &m
	if a.LogSubject {
		res.subject = claims.Subject
	}
	if _, left := r.Header["Sec-Websocket-Protocol"]; !left {
		res.protocol = protocol
	}
	return res
}

// tooLong reports a token valid for longer than its provider's largest
// lifetime (or the pool's, when the provider sets none), counted from its
// "iat": a revocation is kept that long, and a token that outlived it
// would come back. A token without "iat" cannot be bounded so, and is
// refused.
func tooLong(c *auth.Claims, p *auth.Provider, poolMax time.Duration) bool {
	max := poolMax
	if p != nil && p.MaxLifetime > 0 {
		max = p.MaxLifetime
	}
	return c.IssuedAt.IsZero() || c.Expiry.Sub(c.IssuedAt) > max
}

// allowed reports whether claims meet every rule: the claim, a string or
// an array of strings, holds one of the rule's values.
func allowed(c *auth.Claims, rules []ClaimRule) bool {
	for _, rule := range rules {
		v, ok := c.Values(rule.Claim)
		if !ok || !anyOf(v, rule.Values) {
			return false
		}
	}
	return true
}

func anyOf(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w {
				return true
			}
		}
	}
	return false
}

// validHeaderValue refuses what would break the request head: a claim
// is the issuer's, not edge's, and an issuer may be careless.
func validHeaderValue(v string) bool {
	if len(v) > 1024 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// findToken returns the first token found in the places listed.
func findToken(r *http.Request, from []TokenSource) string {
	for _, src := range from {
		if t := tokenIn(r, src); t != "" {
			return t
		}
	}
	return ""
}

func tokenIn(r *http.Request, src TokenSource) string {
	switch src.Kind {
	case TokenHeader:
		v := r.Header.Get(headerName(src))
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			return strings.TrimSpace(v[7:])
		}
	case TokenCookie:
		if c, err := r.Cookie(src.Name); err == nil {
			return c.Value
		}
	case TokenProtocol:
		for _, p := range protocols(r.Header) {
			if t, ok := strings.CutPrefix(p, src.Name); ok && t != "" {
				return protocolToken(t)
			}
		}
	case TokenQuery:
		return r.URL.Query().Get(src.Name)
	}
	return ""
}

// protocolToken is the token a subprotocol entry carries: the JWT itself
// (its characters are all allowed in a subprotocol), or the JWT encoded
// once more in base64url as the Kubernetes convention has it
// (base64url.bearer.authorization.k8s.io.<base64url of the token>),
// which has no '.' where a JWT has two.
func protocolToken(t string) string {
	if strings.Contains(t, ".") {
		return t
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(t, "="))
	if err != nil {
		return t
	}
	return string(b)
}

func headerName(src TokenSource) string {
	if src.Name == "" {
		return "Authorization"
	}
	return src.Name
}

// protocols lists the entries of Sec-WebSocket-Protocol (RFC 6455
// §4.1: comma-separated, over any number of header lines).
func protocols(h http.Header) []string {
	var out []string
	for _, line := range h["Sec-Websocket-Protocol"] {
		for _, p := range strings.Split(line, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// stripToken removes every place a token may be from r, found or not: a
// client must not pass a second token to the backend behind the one edge
// checked.
func stripToken(r *http.Request, from []TokenSource) {
	for _, src := range from {
		switch src.Kind {
		case TokenHeader:
			r.Header.Del(headerName(src))
		case TokenCookie:
			stripCookie(r.Header, src.Name)
		case TokenProtocol:
			stripProtocol(r.Header, src.Name)
		case TokenQuery:
			stripQuery(r, src.Name)
		}
	}
}

func stripCookie(h http.Header, name string) {
	lines := h["Cookie"]
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for _, part := range strings.Split(line, ";") {
			part = textproto.TrimString(part)
			k, _, _ := strings.Cut(part, "=")
			// The name trimmed as net/http's parser trims it: "tok =x" is
			// the cookie tok to r.Cookie, so it must be to the strip too.
			if part != "" && textproto.TrimString(k) != name {
				kept = append(kept, part)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = []string{strings.Join(kept, "; ")}
}

// stripProtocol removes the token's entry from the offered subprotocols;
// the backend chooses among the others, and edge echoes its choice
// (RFC 6455 §4.2.2). When the token's entry was all the client offered,
// the backend is offered none, and the 101 names that entry
// (switchingResponse): a browser that offered subprotocols fails a 101
// that names none.
func stripProtocol(h http.Header, prefix string) {
	ps := protocols(h)
	if len(ps) == 0 {
		return
	}
	var kept []string
	for _, p := range ps {
		if !strings.HasPrefix(p, prefix) {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		delete(h, "Sec-Websocket-Protocol")
		return
	}
	h["Sec-Websocket-Protocol"] = []string{strings.Join(kept, ", ")}
}

// stripQuery removes the parameter name from r's query, every copy and
// spelling of it (decoded as url.ParseQuery decodes), leaving the other
// parameters as they were written, in their order (a signed URL stays
// signed); a query edge cannot parse could hide the parameter, so it is
// dropped whole.
func stripQuery(r *http.Request, name string) {
	if r.URL.RawQuery == "" {
		return
	}
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		r.URL.RawQuery = ""
		r.RequestURI = r.URL.RequestURI()
		return
	}
	parts := strings.Split(r.URL.RawQuery, "&")
	kept := parts[:0]
	for _, part := range parts {
		k, _, _ := strings.Cut(part, "=")
		if dk, err := url.QueryUnescape(k); err == nil && dk == name {
			continue
		}
		kept = append(kept, part)
	}
	if len(kept) == len(parts) {
		return
	}
	r.URL.RawQuery = strings.Join(kept, "&")
	r.RequestURI = r.URL.RequestURI()
}

// tokenProtocol is the entry of the client's offer that carried its token
// when the pool takes tokens from Sec-WebSocket-Protocol ("": none).
func tokenProtocol(offered []string, a *compiledAuth) string {
	for _, src := range a.From {
		if src.Kind != TokenProtocol {
			continue
		}
		for _, line := range offered {
			for _, p := range strings.Split(line, ",") {
				if p = strings.TrimSpace(p); strings.HasPrefix(p, src.Name) {
					return p
				}
			}
		}
	}
	return ""
}

// expiryAt is when a connection with a token expiring at exp closes:
// exp + grace, plus its place in the spread. The places follow a Weyl
// sequence (k times the golden ratio, modulo 1) of one counter per
// Server, so any run of connections admitted together, as tokens minted
// together are, covers the spread evenly rather than at random: N of
// them close at N/spread per second, give or take one.
func (s *Server) expiryAt(exp time.Time, a *compiledAuth) int64 {
	k := s.expirySeq.Add(1)
	const phi = 0.6180339887498949
	_, frac := math.Modf(float64(k) * phi)
	return exp.Add(a.Grace).UnixNano() + int64(frac*float64(a.Spread))
}

// expiryFrom is expiryAt for a token admitted at now: one accepted within
// its provider's leeway after exp starts its spread at now, not in the
// past, so it is not closed right after its 101 into a reconnect loop.
func (s *Server) expiryFrom(exp, now time.Time, a *compiledAuth) int64 {
	return s.expiryAt(maxTime(exp, now), a)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// subjects counts live connections per subject for pools with a
// per-subject limit, across reloads (by pool name, as poolCounter), and
// holds what the other edges of a fleet count (SetFleetSubjects).
type subjects struct {
	mu    sync.Mutex
	n     map[subjectKey]int32
	fleet map[string]map[uint64]int64 // by pool; nil: local counts alone
	// names are the subjects of pools that log them (Auth.LogSubject),
	// held while a connection of theirs lives.
	names map[subjectKey]*subjectName
}

// subjectName is one subject's name and how many live connections hold it.
type subjectName struct {
	name string
	refs int32
}

// nameHold keeps sub's name while a connection of pool holds it.
func (t *subjects) nameHold(pool string, sub uint64, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.names == nil {
		t.names = map[subjectKey]*subjectName{}
	}
	k := subjectKey{pool, sub}
	if n := t.names[k]; n != nil {
		n.refs++
		return
	}
	t.names[k] = &subjectName{name: name, refs: 1}
}

// nameGive releases what nameHold kept.
func (t *subjects) nameGive(pool string, sub uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := subjectKey{pool, sub}
	if n := t.names[k]; n != nil {
		if n.refs--; n.refs <= 0 {
			delete(t.names, k)
		}
	}
}

// nameOf is sub's name in pool, "" when the pool does not log it.
func (t *subjects) nameOf(pool string, sub uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.names[subjectKey{pool, sub}]; n != nil {
		return n.name
	}
	return ""
}

type subjectKey struct {
	pool string
	sub  uint64
}

// take counts one more connection of sub to pool, or reports false when
// that would pass max.
func (t *subjects) take(pool string, sub uint64, max int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := subjectKey{pool, sub}
	if int64(t.n[k])+t.fleet[pool][sub] >= int64(max) {
		return false
	}
	if t.n == nil {
		t.n = map[subjectKey]int32{}
	}
	t.n[k]++
	return true
}

// hold counts one more connection of sub to pool, over any limit.
func (t *subjects) hold(pool string, sub uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[subjectKey]int32{}
	}
	t.n[subjectKey{pool, sub}]++
}

func (t *subjects) give(pool string, sub uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := subjectKey{pool, sub}
	if t.n[k] <= 1 {
		delete(t.n, k)
		return
	}
	t.n[k]--
}

// SubjectCount is one subject's live connections to a pool on this edge,
// the subject by its hash (auth.SubjectHash).
type SubjectCount struct {
	Subject uint64
	Conns   int64
}

// HeavySubjects lists the subjects holding at least min live WebSockets
// to pool on this edge, the heaviest first, at most max: what an edge
// publishes for a per-subject limit of fleet scope.
func (s *Server) HeavySubjects(pool string, min, max int) []SubjectCount {
	t := &s.subjects
	t.mu.Lock()
	var out []SubjectCount
	for k, n := range t.n {
		if k.pool == pool && int(n) >= min {
			out = append(out, SubjectCount{k.sub, int64(n)})
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b SubjectCount) int { return cmp.Compare(b.Conns, a.Conns) })
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// SetFleetSubjects sets what the other edges of the fleet count for each
// subject of pool, which a per-subject limit adds to this edge's own
// count; nil counts this edge's alone (the fleet's numbers are stale).
func (s *Server) SetFleetSubjects(pool string, others map[uint64]int64) {
	t := &s.subjects
	t.mu.Lock()
	defer t.mu.Unlock()
	if others == nil {
		delete(t.fleet, pool)
		return
	}
	if t.fleet == nil {
		t.fleet = map[string]map[uint64]int64{}
	}
	t.fleet[pool] = others
}

// SetRevoked replaces the revocations the Server enforces, and closes
// the live connections whose tokens the new set names, each with its
// pool's close code; it returns how many were asked to close. The set is
// the caller's, compiled (the file's entries, the admin API's, the
// fleet's).
func (s *Server) SetRevoked(r *auth.Revoked) int {
	s.revoked.Store(r)
	n := 0
	now := time.Now().UnixNano()
	s.reg.each(func(c *wsConn) {
		if c.who != nil && r.Revoked(*c.who) && c.revoke(now) {
			n++
		}
	})
	return n
}

// revoke asks c to close with its pool's code for a revoked token: at
// the next frame boundary, and ended wsession.FinTimeout later if none
// comes (the session's expiry moved to now). It reports whether this was
// the first request.
func (c *wsConn) revoke(now int64) bool {
	if !c.sess.Request(c.pool.ws.ExpiryCode, ReasonTokenRevoked) {
		return false
	}
	c.sess.ExpireNow(now)
	c.d.wake()
	return true
}

// revokedSet is the Server's current revocations (nil: none).
type revokedSet = atomic.Pointer[auth.Revoked]

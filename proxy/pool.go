package proxy

import (
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/edgelb/edge/proxy/internal/wsession"
)

// pool is a Pool compiled by SetRoutes: every field is the value the data
// path uses, with the defaults applied and every "off" settled, and the
// balancer, limiter, admission bucket, connection counter and plain-HTTP
// transport resolved once, so that no request decides a default, takes a
// lock to find its counters or reads the caller's Pool. A pool is
// immutable once its routing table is published; a live connection keeps
// the one it was admitted through. docs/ARCHITECTURE.md ("Where defaults
// live") states the convention the compilation follows.
type pool struct {
	name      string
	balancer  *balance.Pool
	limiter   *balance.Limiter // nil: none (its methods take a nil receiver)
	admission *balance.Bucket  // nil: no cap
	// use counts the pool's connections and in-flight requests, by name,
	// across reloads (Server.poolCounter): set by SetRoutes.
	use *atomic.Int64
	// transport carries the pool's plain HTTP requests (http.go): set by
	// SetRoutes, kept across reloads while the dial timeout is unchanged.
	transport *http.Transport

	maxConns int64 // 0: unlimited
	retries  int   // further backends tried; never negative

	dialTimeout, handshakeTimeout, requestTimeout time.Duration
	// writeTimeout bounds a write to either side of a WebSocket and each
	// write of a relayed or plain answer to the client, on both splice
	// drivers; with no pool write timeout a peer that never reads would
	// hold its queue or its goroutine (the 101 to a half-open client,
	// say) forever: bounded like the handshake. Never 0.
	writeTimeout           time.Duration
	maxBodyBytes           int64
	maxResponseHeaderBytes int

	cookieName, cookiePath string
	cookieMaxAge           int // seconds; 0: a session cookie
	cookieSameSite         http.SameSite

	// ws is the session's configuration: every limit, timer and rate of a
	// spliced connection, 0 where off.
	ws          wsession.Config
	deflate     wswire.DeflateMode
	deflateBits int // 0: no window cap

	// auth is the token policy, its defaults settled; nil: off.
	auth *compiledAuth

	// timeouts are the pool's timers the readiness runtime's sweep period
	// follows (Server.noteTimeouts); 0 where off.
	timeouts [7]time.Duration
}

// compilePool applies p's defaults and settles its "off" values: the one
// place they are decided. The counter and the transport are the Server's
// (SetRoutes sets them).
func compilePool(p *Pool) *pool {
	c := &pool{
		name:      p.Name,
		balancer:  p.Balancer,
		limiter:   p.Limiter,
		admission: p.Admission,
		maxConns:  max(p.MaxConns, 0),
		retries:   max(p.Retries, 0),

		dialTimeout:            orDefault(p.DialTimeout, defaultDialTimeout),
		handshakeTimeout:       orDefault(p.HandshakeTimeout, defaultHandshakeTimeout),
		requestTimeout:         orDefault(p.RequestTimeout, defaultRequestTimeout),
		maxBodyBytes:           orDefault(p.MaxBodyBytes, defaultMaxBodyBytes),
		maxResponseHeaderBytes: orDefault(p.MaxResponseHeaderBytes, defaultMaxResponseHeaderBytes),

		cookieName:     orDefault(p.Cookie.Name, defaultCookieName),
		cookiePath:     orDefault(p.Cookie.Path, "/"),
		cookieSameSite: p.Cookie.SameSite,
		deflateBits:    max(p.DeflateMaxWindowBits, 0),
		auth:           compileAuth(p.Auth),
	}
	c.writeTimeout = orDefault(p.WriteTimeout, c.handshakeTimeout)
	if p.Cookie.MaxAge > 0 {
		c.cookieMaxAge = int(math.Ceil(p.Cookie.MaxAge.Seconds()))
	}
	c.ws = wsession.Config{
		MaxFrameBytes:   max(p.MaxFrameBytes, 0),
		MaxMessageBytes: max(p.MaxMessageBytes, 0),
		PingInterval:    max(p.PingInterval, 0),
		PingTimeout:     max(p.PingTimeout, 0),
		LingerTimeout:   lingerTimeout(p.LingerTimeout),
		LingerBytes:     orDefault(p.LingerBytes, defaultLingerBytes),
		Rate: wsession.Rate{Messages: max(p.RateMessages, 0), MessageBurst: max(p.RateMessageBurst, 0),
			Bytes: max(p.RateBytes, 0), ByteBurst: max(p.RateByteBurst, 0), Slow: p.RateSlow},
		IdleTimeout:  max(p.IdleTimeout, 0),
		WriteTimeout: c.writeTimeout,
	}
	// Set without a token policy too: a connection adopted from another
	// process keeps its token's end in a pool that has none now.
	c.ws.ExpiryCode, c.ws.ExpiryReason = ClosePolicyViolation, ReasonTokenExpired
	if c.auth != nil {
		c.ws.ExpiryCode = c.auth.closeCode
	}
	switch pol := p.Deflate; {
	case pol == DeflateStrip:
		c.deflate = wswire.DeflateStrip
	case (pol == DeflateLimit || pol == "") && c.ws.MaxMessageBytes > 0:
		c.deflate = wswire.DeflateOnly
		c.ws.Inflate = new(wsession.Inflaters)
		if c.ws.Rate.Bytes == 0 {
			c.ws.Rate.Bytes = defaultDeflateBytesPerSecond
			c.ws.Rate.ByteBurst = max(c.ws.Rate.ByteBurst, float64(c.ws.MaxMessageBytes), defaultDeflateBytesPerSecond)
		}
	}
	// A client paused for its rate resumes at the next sweep: a quarter
	// of 400 ms bounds the pause's overshoot at 100 ms.
	rate := time.Duration(0)
	if c.ws.Rate.Slow && c.ws.Rate.On() {
		rate = 400 * time.Millisecond
	}
	// Token expiries are spread evenly over the pool's spread; a sweep
	// once a second would close each second's share in one burst at its
	// tick, so a quarter of 400 ms keeps the closes as even as their
	// deadlines (the sweep costs what is due, not what is held).
	expiry := time.Duration(0)
	if c.auth != nil {
		expiry = 400 * time.Millisecond
	}
	c.timeouts = [...]time.Duration{c.ws.IdleTimeout, c.writeTimeout, c.ws.PingInterval, c.ws.PingTimeout, c.ws.LingerTimeout, rate, expiry}
	return c
}

// lingerTimeout is Pool.LingerTimeout's effective value: 0 means the
// default, negative no lingering (wsession's 0).
func lingerTimeout(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return defaultLingerTimeout
	case d < 0:
		return 0
	}
	return d
}

// standIn is the pool of an adopted connection whose pool is not in this
// process: it only counts (Server.adoptTarget).
func (s *Server) standIn(name string) *pool {
	c := compilePool(&Pool{Name: name})
	c.use = s.poolCounter(name)
	return c
}

// orDefault is v, or def when v is not positive (zero or empty).
func orDefault[T int | int64 | time.Duration | string](v, def T) T {
	var zero T
	if v <= zero {
		return def
	}
	return v
}

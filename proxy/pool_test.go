package proxy

import (
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/wswire"
)

// TestCompilePoolDefaults: a zero Pool compiles to every default the
// Pool's comments name; a write timeout left 0 is the handshake timeout.
func TestCompilePoolDefaults(t *testing.T) {
	c := compilePool(&Pool{Name: "p", HandshakeTimeout: 3 * time.Second})
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"dial", c.dialTimeout, defaultDialTimeout},
		{"handshake", c.handshakeTimeout, 3 * time.Second},
		{"write", c.writeTimeout, 3 * time.Second},
		{"session write", c.ws.WriteTimeout, 3 * time.Second},
		{"request", c.requestTimeout, defaultRequestTimeout},
		{"body", c.maxBodyBytes, int64(defaultMaxBodyBytes)},
		{"head", c.maxResponseHeaderBytes, defaultMaxResponseHeaderBytes},
		{"cookie name", c.cookieName, defaultCookieName},
		{"cookie path", c.cookiePath, "/"},
		{"cookie max age", c.cookieMaxAge, 0},
		{"linger", c.ws.LingerTimeout, defaultLingerTimeout},
		{"linger bytes", c.ws.LingerBytes, int64(defaultLingerBytes)},
		{"retries", c.retries, 0},
		{"max conns", c.maxConns, int64(0)},
		{"deflate", c.deflate, wswire.DeflatePass},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if c.ws.FrameAware() {
		t.Error("a zero pool is frame-aware; want the opaque splice")
	}
}

// TestCompilePoolOff: a negative value is off wherever off is allowed
// (the session's 0), and a default for bounds that must hold; no
// negative value reaches the data path.
func TestCompilePoolOff(t *testing.T) {
	c := compilePool(&Pool{
		Retries: -1, MaxConns: -5, IdleTimeout: -time.Second, PingInterval: -time.Second,
		PingTimeout: -time.Second, MaxFrameBytes: -1, MaxMessageBytes: -1, LingerTimeout: -1,
		RateMessages: -3, RateBytes: -3, RateSlow: true, DeflateMaxWindowBits: -1,
		DialTimeout: -time.Second, WriteTimeout: -time.Second, LingerBytes: -1, MaxBodyBytes: -1,
	})
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		// Retries -1 once meant no attempt at all.
		{"retries", c.retries, 0},
		{"max conns", c.maxConns, int64(0)},
		{"idle", c.ws.IdleTimeout, time.Duration(0)},
		{"ping", c.ws.PingInterval, time.Duration(0)},
		{"ping timeout", c.ws.PingTimeout, time.Duration(0)},
		{"frame", c.ws.MaxFrameBytes, int64(0)},
		{"message", c.ws.MaxMessageBytes, int64(0)},
		{"linger", c.ws.LingerTimeout, time.Duration(0)},
		{"window bits", c.deflateBits, 0},
		{"dial", c.dialTimeout, defaultDialTimeout},
		{"write", c.writeTimeout, defaultHandshakeTimeout},
		{"linger bytes", c.ws.LingerBytes, int64(defaultLingerBytes)},
		{"body", c.maxBodyBytes, int64(defaultMaxBodyBytes)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if c.ws.Rate.On() || c.ws.FrameAware() {
		t.Error("negative rates are on; want off")
	}
	for i, d := range c.timeouts {
		if d < 0 {
			t.Errorf("sweep timeout %d: %v, want none negative", i, d)
		}
	}
}

// TestCompilePoolDeflate: the limit policy (and the default, with a
// message limit) counts inflated; without a message limit it is pass.
func TestCompilePoolDeflate(t *testing.T) {
	for _, tc := range []struct {
		pol     DeflatePolicy
		msg     int64
		want    wswire.DeflateMode
		inflate bool
	}{
		{"", 0, wswire.DeflatePass, false},
		{"", 1 << 20, wswire.DeflateOnly, true},
		{DeflateLimit, 0, wswire.DeflatePass, false},
		{DeflateLimit, 1 << 20, wswire.DeflateOnly, true},
		{DeflatePass, 1 << 20, wswire.DeflatePass, false},
		{DeflateStrip, 1 << 20, wswire.DeflateStrip, false},
	} {
		c := compilePool(&Pool{Deflate: tc.pol, MaxMessageBytes: tc.msg})
		if c.deflate != tc.want || (c.ws.Inflate != nil) != tc.inflate {
			t.Errorf("%q with message limit %d: mode %v, inflating %v; want %v, %v",
				tc.pol, tc.msg, c.deflate, c.ws.Inflate != nil, tc.want, tc.inflate)
		}
		// Counting costs what the wire asks (crafted DEFLATE about 100x
		// splicing): a counted pool has a byte rate, its own or the
		// default, whose burst lets a message of the largest size through.
		if tc.inflate && (c.ws.Rate.Bytes != defaultDeflateBytesPerSecond || c.ws.Rate.ByteBurst != float64(tc.msg)) {
			t.Errorf("%q with message limit %d: byte rate %v burst %v, want the default and the message limit", tc.pol, tc.msg, c.ws.Rate.Bytes, c.ws.Rate.ByteBurst)
		}
		if !tc.inflate && c.ws.Rate.Bytes != 0 {
			t.Errorf("%q with message limit %d: byte rate %v without counting", tc.pol, tc.msg, c.ws.Rate.Bytes)
		}
	}
	own := compilePool(&Pool{MaxMessageBytes: 1 << 20, RateBytes: 10 << 20, RateByteBurst: 1 << 20})
	if own.ws.Rate.Bytes != 10<<20 || own.ws.Rate.ByteBurst != 1<<20 {
		t.Errorf("the pool's own byte rate became %v, burst %v", own.ws.Rate.Bytes, own.ws.Rate.ByteBurst)
	}
}

// TestSetRoutesCompiles: SetRoutes resolves a pool once (one compiled
// pool for two routes naming it, its counter by name across reloads, its
// transport), and a Pool changed afterwards changes nothing until the next
// SetRoutes.
func TestSetRoutesCompiles(t *testing.T) {
	bp, err := balance.NewPool(balance.PoolOptions{Name: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	p := &Pool{Name: "chat", Balancer: bp, MaxConns: 1}
	s, err := New(Options{Routes: []Route{{Hosts: []string{"a.test"}, Pool: p}, {Default: true, Pool: p}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tbl := s.routes.Load()
	a, d := tbl.match("a.test", "/"), tbl.match("other.test", "/")
	if len(tbl.pools) != 1 || a.pool != d.pool || a.pool != tbl.pools[0] {
		t.Fatalf("two routes to one Pool: %d compiled pools; want one, shared", len(tbl.pools))
	}
	c := a.pool
	if c.use == nil || c.use != s.poolCounter("chat") || c.transport == nil {
		t.Fatal("counter or transport not resolved by SetRoutes")
	}
	p.MaxConns, p.Retries, p.Limiter = 7, 3, balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 1})
	if c.maxConns != 1 || c.retries != 0 || c.limiter != nil {
		t.Fatal("a Pool changed after SetRoutes reached the compiled pool")
	}
	if err := s.SetRoutes([]Route{{Default: true, Pool: p}}); err != nil {
		t.Fatal(err)
	}
	n := s.routes.Load().pools[0]
	if n.maxConns != 7 || n.retries != 3 || n.limiter != p.Limiter {
		t.Fatal("the next SetRoutes did not compile the changed Pool")
	}
	if n.use != c.use || n.transport != c.transport {
		t.Fatal("a reload with the same name and dial timeout lost the pool's counter or transport")
	}
}

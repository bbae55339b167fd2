package proxy

import (
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/edgelb/edge/balance"
)

// Defaults applied when a Pool leaves a field zero.
const (
	defaultDialTimeout      = 2 * time.Second
	defaultHandshakeTimeout = 10 * time.Second
	defaultRequestTimeout   = 60 * time.Second
	defaultMaxBodyBytes     = 10 << 20
	defaultCookieName       = "edge_sticky"
	// defaultMaxResponseHeaderBytes bounds a backend's response head
	// (status line and fields) during the upgrade.
	defaultMaxResponseHeaderBytes = 64 << 10
	// maxRelayBody bounds the body of a non-101 answer to an upgrade.
	maxRelayBody = 64 << 10
	// retryAfterBusy is the Retry-After sent with 503 for concurrency caps.
	retryAfterBusy = "1"
)

// defaultReadBodyTimeout applies when ListenerOptions.ReadBodyTimeout is 0.
const defaultReadBodyTimeout = 30 * time.Second

// defaultAnswerTimeout applies when ListenerOptions.AnswerTimeout is 0.
const defaultAnswerTimeout = 10 * time.Second

// Lingering close defaults (Pool.LingerTimeout, Pool.LingerBytes). The
// bytes cover what a client fast on loopback still has in flight after a
// frame over a limit (its own buffer and both kernels' buffers: several
// MiB); the time is nginx's lingering_timeout.
const (
	defaultLingerTimeout = 5 * time.Second
	defaultLingerBytes   = 16 << 20
)

// defaultDeflateBytesPerSecond is the byte rate of a client under the
// deflate policy limit when the pool sets none. Counting a compressed
// message costs what its wire bytes ask, and the worst input (a stream of
// empty dynamic-Huffman blocks, each a few bytes naming a 286-code table
// that inflates to nothing) costs tens of times what splicing it would
// (docs/BENCHMARKS.md, "counting compressed input", has the figures per
// byte and the share of a core one connection takes at this rate).
// Without a rate one fast client would keep an edge core busy; at this
// one a connection takes a small share of one, and a client of a chat, a
// game or a trading screen never sends that much for long. The burst is the message limit, so a
// message of the largest size allowed still goes at once.
const defaultDeflateBytesPerSecond = 512 << 10

// Options configure a Server.
type Options struct {
	Routes    []Route
	MaxConns  int64        // connections and in-flight requests, all routes; 0 = unlimited
	Logger    *slog.Logger // errors and debug; nil discards
	AccessLog *slog.Logger // one Info line per connection or request; nil discards
	Observer  Observer     // nil means NopObserver
	Now       func() time.Time
	// Quiet, when set, is called (on the readiness runtime's sweeper)
	// once a burst of at least a thousand new WebSockets is over (two
	// seconds with no more than a trickle of new ones, whatever the
	// traffic of those up), at most once a minute: every TLS handshake
	// leaves garbage the collector keeps as headroom, and this is when
	// the owner can give it back (debug.FreeOSMemory), a pause too rare
	// to move a percentile (proxy/internal/ready/trim_linux.go).
	Quiet func()
}

// Route sends requests for some hosts and a path prefix to a pool.
type Route struct {
	// Hosts are exact names or "*.example.com" (one or more labels below
	// example.com). Case-insensitive; a port in the request is ignored.
	// Empty means any host.
	Hosts []string
	// PathPrefix matches on segment boundaries: "/chat" matches "/chat" and
	// "/chat/x", not "/chatroom". Empty or "/" matches every path.
	PathPrefix string
	// Default marks the route used when no other matches. At most one.
	Default bool
	// Declared marks a route from the registry rather than the file. It
	// is matched only for hosts no file route names, after the file's
	// routes and before the default route; a declared route that does
	// not compile is left out rather than failing SetRoutes.
	Declared bool
	Pool     *Pool
}

// Pool is a balance pool with its connection settings: what the caller
// asks for. SetRoutes compiles it (pool.go) into the value the data path
// reads, with every default applied and every "off" settled, so a Pool
// changed after SetRoutes changes nothing until the next SetRoutes. A zero
// field means the default its comment names; where that default is not
// off, a negative value turns the setting off, and where a bound must
// hold (the dial, handshake, write and request timeouts, the body and
// head bounds, LingerBytes) a negative value is the default too
// (docs/ARCHITECTURE.md, "Where defaults live").
type Pool struct {
	Name     string
	Balancer *balance.Pool
	Limiter  *balance.Limiter // per client IP; nil means none
	// Admission caps new connections and requests per second to the pool
	// from all clients together; nil means no cap. Whoever is refused gets
	// a 503 with a Retry-After spread over a few seconds, so a refused
	// reconnect storm does not come back as one.
	Admission        *balance.Bucket
	MaxConns         int64         // connections and in-flight requests of this pool; 0 or negative: unlimited
	DialTimeout      time.Duration // 0 means 2s
	HandshakeTimeout time.Duration // writing the upgrade and reading the answer; 0 means 10s
	IdleTimeout      time.Duration // no bytes either way; 0 means none
	WriteTimeout     time.Duration // one write to either side (a queue not drained, on the readiness splice); 0 means the handshake timeout
	Retries          int           // further backends tried after a dial or handshake failure; 0 or negative: none
	// MaxResponseHeaderBytes bounds the backend's answer to the upgrade
	// request before its final head is complete (interim answers included);
	// 0 means 64 KiB. More is that backend's failure.
	MaxResponseHeaderBytes int
	Cookie                 CookieSettings
	// RequestTimeout bounds a whole plain HTTP exchange; 0 means 60s.
	RequestTimeout time.Duration
	// MaxBodyBytes bounds plain HTTP request and response bodies; 0 means 10 MiB.
	MaxBodyBytes int64

	// Frame-aware splice (see the package documentation); all zero keeps
	// the splice opaque.
	//
	// MaxFrameBytes bounds the payload length of one WebSocket frame in
	// either direction; 0 means no limit. A client frame over it gets the
	// client a close 1009, a backend frame over it closes both sockets.
	MaxFrameBytes int64
	// MaxMessageBytes bounds the sum of the payload lengths of one client
	// message's frames (continuation frames included, control frames
	// excluded); 0 means no limit. A message over it gets the client a
	// close 1009 at the header of the frame that crosses it.
	MaxMessageBytes int64
	// PingInterval is how long the client may send nothing before the
	// proxy sends it a ping; 0 means no pings.
	PingInterval time.Duration
	// PingTimeout, with PingInterval, closes a connection whose client
	// sends nothing at all within it after a ping; 0 means none.
	PingTimeout time.Duration

	// Deflate is what edge does with permessage-deflate (RFC 7692) and
	// the other compression extensions a client offers; "" means
	// DeflateLimit when MaxMessageBytes is set, else DeflatePass.
	Deflate DeflatePolicy
	// DeflateMaxWindowBits, 9 to 15, caps server_max_window_bits and
	// client_max_window_bits in both handshakes: the windows, hence the
	// compression memory, of backends and clients; 0 means no cap.
	DeflateMaxWindowBits int
	// Auth is the pool's token policy (auth.go); nil: none.
	Auth *Auth

	// Per-connection rates of what the client sends, each a token bucket
	// (GCRA, 16 bytes a connection, nothing allocated per message):
	// RateMessages messages per second (counted at a message's first
	// frame; every control frame counts as one) with a burst of RateMessageBurst, RateBytes bytes per second
	// (every byte read) with a burst of RateByteBurst; 0 means no limit
	// (but under the deflate policy limit, whose default byte rate is
	// defaultDeflateBytesPerSecond with a burst of MaxMessageBytes), a
	// burst of 0 one second's worth. A client over either gets a close
	// 1008 with the reason "rate limited" (ReasonRateLimited), or, with
	// RateSlow, is not read until its bucket has room again, which pushes
	// back through TCP. A rate turns frame-aware mode on.
	RateMessages, RateMessageBurst float64
	RateBytes, RateByteBurst       float64
	RateSlow                       bool

	// Lingering close (every pool, frame-aware or not): once the client
	// was sent a close frame, edge shuts down its write half and reads and
	// drops the client's input for at most LingerTimeout and LingerBytes
	// before closing (RFC 6455 §7.1.1). LingerTimeout 0 means 5s, negative
	// means no lingering; LingerBytes 0 means 16 MiB.
	LingerTimeout time.Duration
	LingerBytes   int64
}

// CookieSettings shape the sticky cookie issued when balance asks for one.
type CookieSettings struct {
	Name     string        // "" means "edge_sticky"
	Path     string        // "" means "/"
	MaxAge   time.Duration // 0 means a session cookie
	SameSite http.SameSite
}

// ListenerOptions describe the listener a Handler serves.
type ListenerOptions struct {
	Name           string
	TLS            bool           // the listener terminates TLS (cookies get Secure)
	TrustedProxies []netip.Prefix // peers whose X-Forwarded-For is believed and extended
	Forwarded      bool           // also send RFC 7239 Forwarded
	// ClientCertHeader, when set, carries the verified client certificate's
	// subject CN (or first SAN) to the backend; a client-sent copy is always
	// removed.
	ClientCertHeader string
	// StrictSNIHost answers 421 Misdirected Request (RFC 9110 §15.5.20) to
	// a TLS request whose Host is not the server name the client sent in
	// SNI; a connection without SNI is not checked.
	StrictSNIHost bool
	// ReadBodyTimeout bounds the wait for each read of a plain request's
	// body: a client that sends nothing of it for this long is answered
	// 408 and its connection closed. 0 means 30s.
	ReadBodyTimeout time.Duration
	// AnswerTimeout bounds writing an answer edge makes itself (a refusal,
	// an error, OPTIONS *): a client that pipelines requests and never
	// reads the answers loses its connection instead of holding it for
	// ever. 0 means 10s.
	AnswerTimeout time.Duration
}

// DeflatePolicy is a pool's handling of compression extensions.
type DeflatePolicy string

// Deflate policies.
const (
	// DeflatePass forwards the client's offer and the backend's answer as
	// they are: compressed messages count compressed against the limits.
	DeflatePass DeflatePolicy = "pass"
	// DeflateStrip removes every compression extension from the client's
	// offer: both sides speak uncompressed frames, the limits count what
	// the backend receives, and nobody holds compression state.
	DeflateStrip DeflatePolicy = "strip"
	// DeflateLimit keeps permessage-deflate end to end (one offer, no
	// other extension) and counts each client message inflated against
	// MaxMessageBytes: a message that would inflate past it gets the
	// client a close 1009 before the backend receives the rest of it. The
	// count needs no LZ77 window and nothing between messages (see
	// internal/wsession), so an idle connection holds no compression state
	// and both sides' negotiated parameters stand as they are. Without a
	// message limit it is DeflatePass.
	DeflateLimit DeflatePolicy = "limit"
)

// withDefaults returns lo with its defaults applied, once per Handler.
func (lo ListenerOptions) withDefaults() ListenerOptions {
	lo.ReadBodyTimeout = orDefault(lo.ReadBodyTimeout, defaultReadBodyTimeout)
	lo.AnswerTimeout = orDefault(lo.AnswerTimeout, defaultAnswerTimeout)
	return lo
}

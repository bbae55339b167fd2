package conf

import (
	"crypto/tls"
	"net/netip"
)

// Values accepted by enumerated settings. cmd/edge maps them onto the
// types of the component that uses them.
const (
	BalanceLeastConn = "least_conn" // power of two choices over active connections, weighted
	BalanceCookie    = "cookie"     // sticky cookie set on the 101 response, then least_conn
	BalanceClientIP  = "client_ip"  // rendezvous hash of the client address with bounded load

	ScopeLocal = "local" // a limit or admin action of this process
	ScopeFleet = "fleet" // a limit or admin action of every edge following consul.fleet.prefix

	SameSiteLax    = "lax"
	SameSiteStrict = "strict"
	SameSiteNone   = "none"

	MustStapleRefuse = "refuse" // a must-staple certificate without a staple is not served
	MustStapleServe  = "serve"  // serve it anyway and let the client decide

	HealthNone      = ""          // no active checks; passive ejection still applies
	HealthTCP       = "tcp"       // connect only
	HealthHTTP      = "http"      // GET path, expect expect_status
	HealthWebSocket = "websocket" // full upgrade handshake on path, expect 101

	LogJSON = "json"
	LogText = "text"

	LeaveDrain = "drain" // a departing backend's clients get close 1012 spread over the window
	LeaveKeep  = "keep"  // a departing backend's clients stay until they or it close
)

// Config is the whole configuration file. It is built by [Parse] or [Load],
// which apply the defaults documented on each field to keys absent from the
// file and then run [Config.Validate]. A Config is never mutated after it is
// handed out: a reload parses a new one.
type Config struct {
	// Admin is the separate listener for /metrics, /healthz, /readyz and
	// the admin API. It never shares a port with public traffic.
	Admin Admin `yaml:"admin"`
	// Metrics is an optional second listener that serves only /metrics
	// and /healthz, for a Prometheus on another host while the admin API
	// stays on loopback.
	Metrics Metrics `yaml:"metrics"`
	// StateDir holds state that must survive restarts: OCSP staples and the
	// last good backend set of each discovered pool (so a cold start works
	// while Consul is down). Optional; a relative path is resolved against
	// the directory of the configuration file.
	StateDir string `yaml:"state_dir"`
	// Log configures the process log and the access log.
	Log Log `yaml:"log"`
	// Limits are process-wide admission limits.
	Limits Limits `yaml:"limits"`
	// Drain controls how live WebSockets are closed on shutdown.
	Drain Drain `yaml:"drain"`
	// Upgrade controls the hand-off of the listeners to a new binary
	// (SIGUSR2, edge -upgrade, POST /api/v1/upgrade).
	Upgrade Upgrade `yaml:"upgrade"`
	// Listeners are the public ports. At least one is required.
	Listeners []Listener `yaml:"listeners"`
	// Routes map a request's host and path onto a pool, shared by all
	// listeners. Most specific host first, then longest path prefix; the
	// default route catches the rest.
	Routes []Route `yaml:"routes"`
	// Pools are groups of interchangeable backends.
	Pools []Pool `yaml:"pools"`
	// Consul is the connection to the Consul agent used by discovery and
	// self-registration.
	Consul Consul `yaml:"consul"`
	// Auth is the issuers of tokens edge verifies for pools with a token
	// policy, and the revocations the file states.
	Auth Auth `yaml:"auth"`

	src      *source  // where each setting came from; nil for a Config built in code
	warnings []*Error // from the last Validate
}

// Admin configures the admin listener.
type Admin struct {
	// Address is host:port. Default 127.0.0.1:9901 (loopback only). A
	// host that is not loopback (127.0.0.0/8, ::1, localhost) needs
	// AllowPublic: the listener has no authentication.
	Address string `yaml:"address" default:"127.0.0.1:9901"`
	// AllowPublic permits an Address that is not loopback; edge then logs
	// a warning at start. Default false.
	AllowPublic bool `yaml:"allow_public"`
	// Pprof serves net/http/pprof under /debug/pprof/ (CPU profiles,
	// goroutine stacks, heap contents). Default false.
	Pprof bool `yaml:"pprof"`
	// AllowedHosts are further names (or IP literals) a request to the
	// admin or the metrics listener may carry as its Host, besides the
	// address it reached, a loopback address and localhost; any other
	// Host is answered 421 unless the request carries the API token, so
	// a page whose name rebinds to edge's address reads nothing. Exact
	// names, no port, no wildcard. Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// API is the runtime admin API under /api/v1/ (drain, weight, disable,
	// enable a backend; list its connections).
	API AdminAPI `yaml:"api"`
}

// AdminAPI configures the runtime admin API on the admin listener.
type AdminAPI struct {
	// Enabled serves /api/v1/ at all; false answers 404 there. Default true.
	Enabled bool `yaml:"enabled" default:"true"`
	// Write allows the operations that change state; false answers 403
	// to them and keeps the reads. Default true.
	Write bool `yaml:"write" default:"true"`
	// TokenFile holds the bearer token write operations must present
	// (Authorization: Bearer ...), at least 16 bytes. Writes always need a
	// token: without token_file or token_env edge generates one into
	// state_dir/admin.token (mode 0600) at its first start, which only
	// edge's own user can read, and without state_dir either the API is
	// read-only. Default "" (none).
	TokenFile string `yaml:"token_file"`
	// TokenEnv names an environment variable holding the token instead.
	// Default "" (none).
	TokenEnv string `yaml:"token_env"`
	// Scope is where drain, disable, enable and weight act when a request
	// does not say (?scope=local or ?scope=fleet): ScopeLocal, this
	// process until it stops; ScopeFleet, every edge following
	// consul.fleet.prefix, kept in Consul KV across restarts. Default
	// local.
	Scope string `yaml:"scope" default:"local"`
}

// Metrics configures the metrics-only listener.
type Metrics struct {
	// Address is host:port. Default empty: no such listener, /metrics is
	// served on the admin listener only. With consul.register, this
	// address (or the admin listener's without it) is announced as the
	// service consul.register.metrics_service.
	Address string `yaml:"address"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level" default:"info"`
	// Format is json or text. Default json.
	Format string `yaml:"format" default:"json"`
	// AccessLog writes one line per finished connection or request.
	// Default true.
	AccessLog bool `yaml:"access_log" default:"true"`
}

// Limits are global admission limits.
type Limits struct {
	// MaxConnections caps concurrent client connections over all
	// listeners; 0 is unlimited. Default, when the key is absent: derived
	// from RLIMIT_NOFILE as (limit - 128) / 2, since every proxied
	// connection holds two descriptors (client and backend) and 128 are
	// kept for the admin listener, Consul, health checks and logs
	// ([Config.MaxConnectionsDerived]).
	MaxConnections int64 `yaml:"max_connections"`
}

// MaxConnectionsDerived reports whether limits.max_connections is absent
// from the file (or zero in a Config built in code), so that cmd/edge
// derives it from the descriptor limit.
func (c *Config) MaxConnectionsDerived() bool {
	if c.src == nil {
		return c.Limits.MaxConnections == 0
	}
	return !c.src.has("limits.max_connections")
}

// Drain controls graceful shutdown. HTTP servers forget hijacked
// connections on shutdown (traefik#3630), and closing every WebSocket at
// once causes a reconnect stampede (caddy#5471), so edge sends close frames
// spread over Window and force-closes what is left at Timeout.
type Drain struct {
	// Delay keeps the listeners open this long after /readyz turned 503,
	// so a load balancer or Consul check in front of edge notices before
	// new connections are refused. Default 0s; behind a balancer set it to
	// about two of its health-check intervals.
	Delay Duration `yaml:"delay"`
	// Window spreads close frames (1001 going away) over this span.
	// Default 10s; 0 closes everything at once.
	Window Duration `yaml:"window" default:"10s"`
	// Timeout force-closes connections still open this long after the
	// drain began. Default 30s; must be >= Window. An upgrade's hand-off
	// adds 5 ms for each live WebSocket it moves.
	Timeout Duration `yaml:"timeout" default:"30s"`
}

// Upgrade controls the hand-off to a new binary: the running process
// starts it with the listening sockets and keeps serving until it is ready.
type Upgrade struct {
	// Timeout is how long the new process has to become ready (serving,
	// /readyz true) before it is killed and the running process keeps
	// serving. Default 60s. Read at start: the process that hands off uses
	// the value it started with.
	Timeout Duration `yaml:"timeout" default:"60s"`
	// FleetConcurrency paces upgrades across the fleet: before starting
	// its new process an edge takes one of this many slots of a Consul
	// semaphore at consul.fleet.prefix + "/upgrade", and holds it until
	// its connections are handed over (or the upgrade failed), so at most
	// this many edges of the fleet hand off at once. Every edge of the
	// fleet must set the same number. Default 0: off, each edge upgrades
	// when told. Needs consul.fleet.prefix; 1..64.
	FleetConcurrency int `yaml:"fleet_concurrency"`
	// FleetWait bounds the wait for a slot; past it the upgrade is refused
	// (409) and this process keeps serving. Default 10m.
	FleetWait Duration `yaml:"fleet_wait" default:"10m"`
}

// Listener is one public port.
type Listener struct {
	// Name appears in metrics and logs. Default "listener-N" where N is the
	// index in the list, starting at 0.
	Name string `yaml:"name"`
	// Address is host:port; an empty host listens on all interfaces.
	// Required.
	Address string `yaml:"address"`
	// TLS terminates TLS (wss://). Absent means plain ws://.
	TLS *TLS `yaml:"tls,omitempty"`
	// ProxyProtocol accepts a PROXY protocol v1/v2 header from trusted
	// peers, as sent by an L4 load balancer in front of edge.
	ProxyProtocol ProxyProtocol `yaml:"proxy_protocol"`
	// TrustedProxies are peers whose X-Forwarded-For is believed and
	// extended. From anyone else the header is replaced, never appended
	// to, so clients cannot choose their address (gorouter#179). Bare
	// addresses mean /32 or /128.
	TrustedProxies []netip.Prefix `yaml:"trusted_proxies"`
	// ForwardedHeader also sends an RFC 7239 Forwarded header to backends.
	// Default false.
	ForwardedHeader bool `yaml:"forwarded_header"`
	// StrictSNIHost answers 421 Misdirected Request (RFC 9110 §15.5.20)
	// to a TLS request whose Host is not the name the client sent in SNI;
	// requests on connections without SNI are not checked. Needs tls.
	// Default false, as in HAProxy and nginx.
	StrictSNIHost bool `yaml:"strict_sni_host"`
	// ReadHeaderTimeout bounds reading the request head. Default 10s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout" default:"10s"`
	// TLSHandshakeTimeout bounds the TLS handshake. Default 10s. The HTTP
	// server bounds the handshake and each request head by one deadline,
	// so both get the smaller of this and ReadHeaderTimeout.
	TLSHandshakeTimeout Duration `yaml:"tls_handshake_timeout" default:"10s"`
	// ReadBodyTimeout bounds the wait for each read of a plain request's
	// body: a client that sends nothing of it for this long is answered
	// 408 and loses its connection (nginx: client_body_timeout). Default 30s.
	ReadBodyTimeout Duration `yaml:"read_body_timeout" default:"30s"`
	// MaxHeaderBytes bounds the request head, 1024 to 1048576.
	// Default 16384.
	MaxHeaderBytes int `yaml:"max_header_bytes" default:"16384"`
}

// TLS configures TLS termination on a listener.
type TLS struct {
	// Certificates are chosen by SNI; the first is the fallback. At least
	// one. Files are watched and reloaded.
	Certificates []Certificate `yaml:"certificates"`
	// MinVersion is "1.2" or "1.3". Default "1.2".
	MinVersion string `yaml:"min_version" default:"1.2"`
	// Curves are the key exchanges offered to clients, by their TLS
	// names (CurveNames). Go picks among them in its own order, hybrid
	// post-quantum first. Default empty: Go's defaults, which prefer
	// X25519MLKEM768 (what Chromium and Firefox send).
	Curves []string `yaml:"curves"`
	// ClientCAFile turns on mutual TLS: clients must present a certificate
	// signed by a CA in this PEM file. Default empty (no client auth).
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientCertHeader names a request header that carries the verified
	// client certificate's subject to the backend. Any copy sent by the
	// client is removed. Needs ClientCAFile. Default empty (not sent).
	ClientCertHeader string `yaml:"client_cert_header"`
	// SessionTickets configures TLS session resumption.
	SessionTickets SessionTickets `yaml:"session_tickets"`
	// OCSP configures OCSP stapling.
	OCSP OCSP `yaml:"ocsp"`
}

// CurveNames are the key exchanges curves accepts, with their crypto/tls
// identifiers (RFC 8446 §4.2.7 named groups; the hybrids of
// draft-ietf-tls-ecdhe-mlkem).
var CurveNames = map[string]tls.CurveID{
	"X25519MLKEM768":     tls.X25519MLKEM768,
	"SecP256r1MLKEM768":  tls.SecP256r1MLKEM768,
	"SecP384r1MLKEM1024": tls.SecP384r1MLKEM1024,
	"X25519":             tls.X25519,
	"P-256":              tls.CurveP256,
	"P-384":              tls.CurveP384,
	"P-521":              tls.CurveP521,
}

// CurveIDs returns Curves as crypto/tls identifiers; nil when Curves is
// empty (Go's defaults). Names are validated already.
func (t *TLS) CurveIDs() []tls.CurveID {
	if len(t.Curves) == 0 {
		return nil
	}
	ids := make([]tls.CurveID, 0, len(t.Curves))
	for _, n := range t.Curves {
		ids = append(ids, CurveNames[n])
	}
	return ids
}

// Version returns MinVersion as a crypto/tls constant (tls.VersionTLS12
// unless MinVersion is "1.3").
func (t *TLS) Version() uint16 {
	if t.MinVersion == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// Certificate is one certificate chain and its private key, both PEM.
// Relative paths are resolved against the configuration file's directory.
type Certificate struct {
	// CertFile holds the leaf first, then its intermediates.
	CertFile string `yaml:"cert_file"`
	// KeyFile holds the leaf's private key.
	KeyFile string `yaml:"key_file"`
	// IssuerFile holds, in PEM, the certificate that signed the leaf (a
	// bundle may hold others too), for OCSP stapling when CertFile holds
	// the leaf alone (HAProxy: the ".issuer" file; nginx:
	// ssl_trusted_certificate). Default empty: the issuer is the
	// certificate after the leaf, else it is fetched from the leaf's
	// caIssuers URL.
	IssuerFile string `yaml:"issuer_file"`
}

// SessionTickets configures TLS session-ticket keys. Resumption fails when
// the next connection lands on another node unless the fleet shares keys
// (traefik PR #10284, envoy#7397): set KeyFile to share them.
type SessionTickets struct {
	// Enabled offers session tickets. Default true.
	Enabled bool `yaml:"enabled" default:"true"`
	// RotateEvery is how often a fresh key starts signing. Default 1h.
	RotateEvery Duration `yaml:"rotate_every" default:"1h"`
	// Keep is how many keys, the signing one included, still decrypt
	// tickets. Default 3.
	Keep int `yaml:"keep" default:"3"`
	// KeyFile, when set, holds the keys shared by the fleet instead of
	// keys generated per process. It is secret; edge only reads it.
	KeyFile string `yaml:"key_file"`
	// ConsulKey, when set, is a Consul KV path where the fleet keeps its
	// keys: every edge reads them there, and whichever edge finds them due
	// rotates them (fleet.TicketKeys). Exclusive with KeyFile.
	ConsulKey string `yaml:"consul_key"`
	// ConsulSealKeyFile holds the key the entry at ConsulKey is sealed
	// with (AES-256-GCM), 32 random bytes as 64 hex digits or base64: the
	// same file on every host of the fleet, and nowhere else. A reader of
	// the entry alone can then neither decrypt a TLS 1.2 session (whose
	// ticket, sent in the clear, carries its master secret) nor forge
	// keys. Required with ConsulKey. Secret.
	ConsulSealKeyFile string `yaml:"consul_seal_key_file"`
}

// OCSP configures stapling. A certificate without an OCSP responder is
// normal (many CAs have stopped running them) and is not an error.
type OCSP struct {
	// Enabled fetches and staples OCSP responses before serving, not
	// lazily (acme.sh#2938). Default true.
	Enabled bool `yaml:"enabled" default:"true"`
	// MustStaple says what to do with a must-staple certificate that has
	// no valid staple: refuse (do not serve it) or serve. Default refuse.
	MustStaple string `yaml:"must_staple" default:"refuse"`
	// ConsulPrefix, when set, is a Consul KV prefix where the fleet shares
	// its OCSP responses (PREFIX/ocsp/<certificate id>): one edge at a
	// time, holding a Consul lock, asks the responder and stores the
	// answer; the others staple it, and ask themselves only when it is
	// missing, invalid or past half its validity. Default "": every edge
	// asks for itself.
	ConsulPrefix string `yaml:"consul_prefix"`
}

// ProxyProtocol configures the PROXY protocol on a listener.
type ProxyProtocol struct {
	// Enabled expects a PROXY header from trusted peers. Default false.
	Enabled bool `yaml:"enabled"`
	// Trusted are the peers allowed to send the header; required when
	// enabled. Others are served with their own address.
	Trusted []netip.Prefix `yaml:"trusted"`
	// Timeout bounds reading the header. Default 5s.
	Timeout Duration `yaml:"timeout" default:"5s"`
}

// Route maps requests onto a pool.
type Route struct {
	// Hosts are exact names or "*.domain" (one leading label). Matching is
	// case-insensitive; names are stored lower-case. Empty matches any
	// host.
	Hosts []string `yaml:"hosts"`
	// PathPrefix matches the request path by prefix. Default "/".
	PathPrefix string `yaml:"path_prefix"`
	// Default marks the route taken when no other matches. At most one;
	// it takes no hosts or path_prefix.
	Default bool `yaml:"default"`
	// Pool is the name of the pool serving the route. Required.
	Pool string `yaml:"pool"`
}

// Pool is a group of interchangeable backends.
type Pool struct {
	// Name identifies the pool in routes, metrics and logs: letters,
	// digits, '_', '-' and '.'. Required and unique.
	Name string `yaml:"name"`
	// Balance is least_conn, cookie or client_ip. Default least_conn.
	Balance string `yaml:"balance" default:"least_conn"`
	// Backends are the static members. Required unless Consul.Service is
	// set, and not allowed with it.
	Backends []Backend `yaml:"backends"`
	// Cookie configures balance: cookie.
	Cookie Cookie `yaml:"cookie"`
	// ClientIP configures balance: client_ip.
	ClientIP ClientIP `yaml:"client_ip"`
	// Timeouts for the backend leg.
	Timeouts Timeouts `yaml:"timeouts"`
	// Retries is how many other backends are tried when a dial or the
	// upgrade handshake fails, before anything reached the client.
	// 0 to 10, default 2.
	Retries int `yaml:"retries" default:"2"`
	// SlowStart ramps a backend's weight from a tenth to all of it over
	// this long after it joins the pool (appears in Consul), comes back
	// from passive ejection or passes its active check again after
	// failing (HAProxy: slowstart; Envoy: slow_start_config), in every
	// balance mode, so a new backend is not handed every new connection
	// at once. The ramp of a joining backend runs from when it appeared
	// in Consul, so every edge ramps it alike. Default 0s, off, as in
	// HAProxy and Envoy: with client_ip a ramp moves the clients hashed
	// to the backend onto it a step at a time, not at once.
	SlowStart Duration `yaml:"slow_start"`
	// PassiveEjection takes backends out after repeated failures seen on
	// real traffic.
	PassiveEjection PassiveEjection `yaml:"passive_ejection"`
	// MaxResponseHeaderBytes bounds a backend's response head to the
	// upgrade request and to health probes, 1024 to 1048576; a longer one
	// is that backend's failure (Envoy: max_response_headers_kb, 60 KiB).
	// Default 65536.
	MaxResponseHeaderBytes int `yaml:"max_response_header_bytes" default:"65536"`
	// Limits are per-pool admission limits; 0 means unlimited.
	Limits PoolLimits `yaml:"limits"`
	// Consul discovers the members from a Consul service.
	Consul PoolConsul `yaml:"consul"`
	// Health configures active health checks.
	Health Health `yaml:"health"`
	// WebSocket turns on frame-aware splicing. With every value 0 (the
	// default) the stream is spliced opaquely.
	WebSocket WebSocket `yaml:"websocket"`
	// BackendLeave says what happens to the live WebSockets of a backend
	// that leaves the pool.
	BackendLeave BackendLeave `yaml:"backend_leave"`
	// Auth is the pool's token policy: required, optional or off.
	Auth PoolAuth `yaml:"auth"`
	// Rebalance moves live connections off backends above their fair
	// share (after a scale-out, a weight change). Off by default.
	Rebalance Rebalance `yaml:"rebalance"`
}

// Rebalance is a pool's rebalancing of live connections: while the
// fleet's connections on a backend stay above its fair share (by weight,
// after slow start) by more than Tolerance for Settle, the edges close
// connections on it with 1012, Rate a second over the fleet, until it is
// within half the tolerance.
type Rebalance struct {
	// Enabled turns it on. Default false. Not with balance: client_ip,
	// whose hash would send a moved client back where it was.
	Enabled bool `yaml:"enabled"`
	// Tolerance is how far above its fair share a backend may be, as a
	// fraction, 0.01 to 1. Default 0.1.
	Tolerance float64 `yaml:"tolerance" default:"0.1"`
	// Settle is how long an imbalance must last before connections move.
	// Default 30s.
	Settle Duration `yaml:"settle" default:"30s"`
	// Rate is how many connections the whole fleet moves a second, each
	// edge its part by what it holds. Default 10.
	Rate float64 `yaml:"rate" default:"10"`
	// MinAge is the least age of a connection that may be moved. Default
	// 1m.
	MinAge Duration `yaml:"min_age" default:"1m"`
}

// BackendLeave is what happens to the live connections of a backend that
// leaves its pool for good: removed from the file (and reloaded), gone from
// Consul, or put in maintenance there. A failing health check is not
// leaving: it only stops new connections, since checks flap and closing a
// backend's clients on every flap would turn a blip into a reconnect storm.
type BackendLeave struct {
	// Connections is drain or keep. drain (the default) sends each client
	// close 1012 (service restart, RFC 6455 §7.4.1 and the IANA registry)
	// at a random moment within Window, between two frames, so clients
	// reconnect to the remaining backends at a bounded rate; keep leaves
	// them open until the client or the backend closes.
	Connections string `yaml:"connections" default:"drain"`
	// Window spreads the close frames over this span. Default 10s; 0
	// closes them all at once.
	Window Duration `yaml:"window" default:"10s"`
}

// WebSocket configures frame-aware handling of spliced WebSockets. Frame
// headers are parsed as they pass (never the payloads): no frame can
// exhaust memory (base/base#2655), and heartbeats reap clients whose
// connection died without a FIN (traefik#10627).
type WebSocket struct {
	// MaxFrameBytes closes a connection whose client sends a frame with a
	// larger payload (close 1009, message too big), or whose backend does.
	// Default 0, no limit.
	MaxFrameBytes int64 `yaml:"max_frame_bytes"`
	// PingInterval sends the client a ping after this long without a byte
	// from it. Default 0s, no pings; 30s suits mobile clients.
	PingInterval Duration `yaml:"ping_interval"`
	// PingTimeout closes the connection when the client sends nothing,
	// not even the pong, this long after a ping. Needs PingInterval.
	// Default 0s, never.
	PingTimeout Duration `yaml:"ping_timeout"`
	// MaxMessageBytes closes a connection whose client sends a message
	// whose frames' payloads (continuation frames included, control frames
	// not) add up to more (close 1009), before the frame that crosses it
	// reaches the backend. Wire bytes: permessage-deflate payloads count
	// compressed unless Deflate is limit (the default with a message
	// limit), which counts them inflated. Default: 4 MiB (at least
	// MaxFrameBytes) when MaxFrameBytes or PingInterval is set, else 0, no
	// limit; 0 written in the file keeps it off.
	MaxMessageBytes int64 `yaml:"max_message_bytes"`
	// Deflate is what edge does with permessage-deflate (RFC 7692) a
	// client offers: pass (as today: end to end, limits count compressed
	// bytes), strip (removed from the offer: both sides speak
	// uncompressed, nobody holds compression state), limit (end to end,
	// each client message counted inflated against MaxMessageBytes; needs
	// it). Default: limit when MaxMessageBytes is set, else pass.
	Deflate string `yaml:"deflate"`
	// DeflateMaxWindowBits, 9 to 15, caps server_max_window_bits and
	// client_max_window_bits in both handshakes, so backends and clients
	// keep windows of at most 2^bits bytes. Default 0, no cap.
	DeflateMaxWindowBits int `yaml:"deflate_max_window_bits"`
	// Rate limits what each client sends on its connection.
	Rate MessageRate `yaml:"rate"`
	// Linger bounds the lingering close (every pool, frame-aware or not):
	// after edge sent the client a close frame it shuts down its write
	// half and reads and drops the client's input for at most this long
	// before closing, so the close frame is not lost to a TCP reset
	// (RFC 6455 §7.1.1). Default 5s; 0 closes at once.
	Linger Duration `yaml:"linger" default:"5s"`
	// LingerBytes bounds what a lingering close reads and drops. Default
	// 16 MiB.
	LingerBytes int64 `yaml:"linger_bytes" default:"16777216"`
}

// MessageRate is a per-connection limit on what a client sends, each
// rate a token bucket: 16 bytes a connection, nothing allocated per
// message. Any rate set turns frame-aware splicing on.
type MessageRate struct {
	// MessagesPerSecond counts frames: a message in one frame is one, and
	// so is each fragment (empty continuations included) and each ping,
	// pong or close. Default 0, no limit.
	MessagesPerSecond float64 `yaml:"messages_per_second"`
	// MessageBurst is the bucket's size in frames. Default 0: one
	// second's worth (at least 1).
	MessageBurst float64 `yaml:"message_burst"`
	// BytesPerSecond counts every byte read from the client. Default 0,
	// no limit.
	// Under deflate: limit, 0 means 512 KiB/s with a burst of
	// max_message_bytes: counting crafted DEFLATE costs many times what
	// splicing the bytes does (docs/BENCHMARKS.md, "counting compressed
	// input").
	BytesPerSecond float64 `yaml:"bytes_per_second"`
	// ByteBurst is the bucket's size in bytes. Default 0: one second's
	// worth.
	ByteBurst float64 `yaml:"byte_burst"`
	// Action over a rate: close (close 1008, policy violation, with the
	// reason "rate limited") or slow (the client is not read until its
	// bucket has room: TCP pushes back). Default close.
	Action string `yaml:"action" default:"close"`
}

// Actions of MessageRate.Action.
const (
	RateClose = "close"
	RateSlow  = "slow"
)

// Deflate policies (WebSocket.Deflate).
const (
	DeflatePass  = "pass"
	DeflateStrip = "strip"
	DeflateLimit = "limit"
)

// Backend is one static pool member.
type Backend struct {
	// Address is host:port. Required.
	Address string `yaml:"address"`
	// ID identifies the backend in cookies and metrics; it must be stable
	// across restarts for stickiness to survive them. Default: Address.
	ID string `yaml:"id"`
	// Weight is relative, 1 to 1000. Default 1; 0 also means 1.
	Weight int `yaml:"weight"`
	// Version is what the backend runs, for canaries: at most 64 printable
	// bytes without spaces. Default none.
	Version string `yaml:"version"`
}

// Cookie configures sticky-cookie balancing. The cookie is set on the 101
// response itself (traefik#3343) and is signed with an HMAC key, so every
// edge in a fleet that shares the secret honours the others' cookies.
type Cookie struct {
	// Name of the cookie. Default edge_sticky.
	Name string `yaml:"name" default:"edge_sticky"`
	// Path attribute. Default "/".
	Path string `yaml:"path" default:"/"`
	// MaxAge attribute; 0 makes a session cookie. Default 0s.
	MaxAge Duration `yaml:"max_age"`
	// SameSite is lax, strict or none. Default lax.
	SameSite string `yaml:"same_site" default:"lax"`
	// SecretFile holds the signing key (at least 16 bytes; surrounding
	// whitespace is trimmed). Relative to the configuration file.
	SecretFile string `yaml:"secret_file"`
	// SecretEnv names an environment variable holding the signing key,
	// instead of SecretFile. With neither, a random key is made per
	// process: stickiness then survives neither restarts nor a fleet.
	SecretEnv string `yaml:"secret_env"`
	// PreviousSecretFile holds the key being rotated out: cookies signed
	// with it are still honoured, and re-signed with the current one.
	PreviousSecretFile string `yaml:"previous_secret_file"`
	// PreviousSecretEnv names an environment variable holding the previous
	// key, instead of PreviousSecretFile. An unset variable means no
	// previous key.
	PreviousSecretEnv string `yaml:"previous_secret_env"`
	// ConsulKey, when set, is a Consul KV path where the fleet keeps this
	// pool's signing keys instead of a secret file: every edge reads them
	// there and follows them with a blocking query, and whichever edge
	// finds them due rotates them (a staged next key every edge accepts a
	// whole period before it signs, previous keys still accepted), so a
	// cookie one edge set is honoured by every other with no file copied.
	// Exclusive with the secret settings.
	ConsulKey string `yaml:"consul_key"`
	// RotateEvery is how long a key from ConsulKey signs. Default 24h.
	RotateEvery Duration `yaml:"rotate_every" default:"24h"`
	// Keep is how many keys from ConsulKey, the signing one included, are
	// still honoured besides the staged one: a client that does not come
	// back for Keep × RotateEvery loses its backend. 1 to 15, default 7.
	Keep int `yaml:"keep" default:"7"`
}

// ClientIP configures client-address balancing.
type ClientIP struct {
	// BoundedLoad caps any backend at this factor times the mean load;
	// clients hashed to a full backend move to the next one in their
	// rendezvous order. At least 1.0. Default 1.25.
	BoundedLoad float64 `yaml:"bounded_load" default:"1.25"`
	// MinExcess is the floor under BoundedLoad: a backend is passed over
	// only when it would carry more than this many connections beyond its
	// weighted share, however small the mean. It keeps one address's own
	// connections (a NATed office, a browser's tabs) on its backend in a
	// quiet pool, and the edges of a fleet, which count only their own
	// connections, agreeing on every address under normal load. 0 leaves
	// the factor alone. Default 64.
	MinExcess int64 `yaml:"min_excess" default:"64"`
}

// Timeouts for the backend leg of a connection.
type Timeouts struct {
	// Dial bounds the TCP connect. Default 2s.
	Dial Duration `yaml:"dial" default:"2s"`
	// Handshake bounds sending the upgrade and reading the 101. Default 10s.
	Handshake Duration `yaml:"handshake" default:"10s"`
	// Idle closes a WebSocket with no traffic in either direction for this
	// long; 0 means never. Default 1h: the 60s of ALB and nginx and the 5
	// minutes of Envoy kill quiet WebSockets (envoy#20062).
	Idle Duration `yaml:"idle" default:"1h"`
	// Write bounds one write to a peer that stopped reading: the backend or
	// the client of a WebSocket, the client of a plain HTTP answer.
	// Default 30s.
	Write Duration `yaml:"write" default:"30s"`
}

// PassiveEjection configures ejection on failures seen on real traffic.
type PassiveEjection struct {
	// Failures within Window eject a backend; 0 turns ejection off.
	// Default 5.
	Failures int `yaml:"failures" default:"5"`
	// Window over which failures are counted. Default 30s.
	Window Duration `yaml:"window" default:"30s"`
	// Cooldown before an ejected backend gets traffic again. Default 30s.
	Cooldown Duration `yaml:"cooldown" default:"30s"`
	// MaxEjectionPercent caps the share of the pool's backends ejected at
	// once, 1 to 100 (Envoy: max_ejection_percent, default 10 there). One
	// backend may always go in a pool of two or more; the last available
	// one never does. Default 50: half a small pool may go, never all.
	MaxEjectionPercent int `yaml:"max_ejection_percent" default:"50"`
}

// PoolLimits are per-pool admission limits. Every limit defaults to 0,
// unlimited. Reconnect storms after a restart (mattermost-webapp#10960)
// are what the rates are for: the pool-wide one caps what reaches the
// backends when many clients come back at once, the per-client-IP one a
// single client's retry loop.
type PoolLimits struct {
	// MaxConnections caps the pool's connections and in-flight requests.
	MaxConnections int64 `yaml:"max_connections"`
	// ConnectionRate caps new connections per second to the pool from all
	// clients together (HAProxy: rate-limit sessions).
	ConnectionRate  float64 `yaml:"connection_rate"`
	ConnectionBurst int     `yaml:"connection_burst"` // default: the rate rounded up
	// MaxConnectionsPerBackend caps each backend (HAProxy: server maxconn).
	MaxConnectionsPerBackend int64 `yaml:"max_connections_per_backend"`
	// MaxConnectionsPerBackendScope is ScopeLocal (each edge process
	// holds up to the limit) or ScopeFleet (the limit is the fleet's, each
	// edge enforces its share of it; needs consul.fleet.prefix). Default
	// local.
	MaxConnectionsPerBackendScope string `yaml:"max_connections_per_backend_scope" default:"local"`
	// ConnectionRateScope is the scope of ConnectionRate and
	// ConnectionBurst, as MaxConnectionsPerBackendScope. Default local.
	ConnectionRateScope string `yaml:"connection_rate_scope" default:"local"`
	// MaxConnectionsPerClientIP caps one client address (IPv6: its /64).
	MaxConnectionsPerClientIP  int     `yaml:"max_connections_per_client_ip"`
	ConnectionRatePerClientIP  float64 `yaml:"connection_rate_per_client_ip"`  // new connections per second
	ConnectionBurstPerClientIP int     `yaml:"connection_burst_per_client_ip"` // default: the rate rounded up
}

// PoolConsul discovers a pool's members from Consul.
type PoolConsul struct {
	// Service is the Consul service name; empty means static backends.
	Service string `yaml:"service"`
	// Tag filters instances by tag. Default empty (all).
	Tag string `yaml:"tag"`
	// Datacenter to query. Default empty (the agent's).
	Datacenter string `yaml:"datacenter"`
	// PassingOnly takes only instances whose checks pass. Default true.
	// edge still runs its own checks: Consul's view is not edge's
	// (fabio#393).
	PassingOnly bool `yaml:"passing_only" default:"true"`
}

// Health configures active health checks.
type Health struct {
	// Type is "" (no active checks), tcp, http or websocket. Default "".
	Type string `yaml:"type"`
	// Interval between probes of one backend. Default 5s.
	Interval Duration `yaml:"interval" default:"5s"`
	// Timeout of one probe, at most Interval. Default 2s.
	Timeout Duration `yaml:"timeout" default:"2s"`
	// Rise successes in a row mark a backend healthy. Default 2.
	Rise int `yaml:"rise" default:"2"`
	// Fall failures in a row mark it unhealthy. Default 3.
	Fall int `yaml:"fall" default:"3"`
	// Path probed by http and websocket checks. Default "/".
	Path string `yaml:"path" default:"/"`
	// ExpectStatus is the status an http check expects, 100 to 599.
	// Default 200. websocket checks always expect 101.
	ExpectStatus int `yaml:"expect_status" default:"200"`
}

// Consul configures the Consul client.
type Consul struct {
	// Address of the agent, host:port or http(s)://host:port. Default
	// empty, meaning the local agent at 127.0.0.1:8500.
	Address string `yaml:"address"`
	// Token is an ACL token. Prefer TokenFile or the CONSUL_HTTP_TOKEN
	// environment variable; see [Consul.ACLToken].
	Token Secret `yaml:"token"`
	// TokenFile holds the ACL token. Relative to the configuration file.
	TokenFile string `yaml:"token_file"`
	// CAFile verifies the agent's certificate when Address is https.
	CAFile string `yaml:"ca_file"`
	// Register registers edge itself as a Consul service.
	Register ConsulRegister `yaml:"register"`
	// Routes says which routes services may declare for themselves in the
	// registry (edge.host and edge.path tags).
	Routes ConsulRoutes `yaml:"routes"`
	// Fleet is what the edges of a fleet share in Consul KV besides keys
	// and staples.
	Fleet ConsulFleet `yaml:"fleet"`
}

// ConsulFleet configures the KV prefix every edge of a fleet follows.
type ConsulFleet struct {
	// Prefix is a Consul KV prefix shared by the fleet's edges, e.g.
	// "edge/fleet": operator actions of fleet scope are kept at
	// PREFIX/admin/<pool>/<backend id>, and each edge publishes its load at
	// PREFIX/edges/<id>, bound to a session; every edge follows both with
	// blocking queries. Default "" (no fleet scope).
	Prefix string `yaml:"prefix"`
	// ID names this edge in the fleet. Default empty: the host name and
	// the admin listener's address, as consul.register.instance.
	ID string `yaml:"id"`
	// PublishEvery is how often the edge publishes its load when it
	// changed; at least 2s. Default 2s.
	PublishEvery Duration `yaml:"publish_every" default:"2s"`
	// SessionTTL is the TTL of the session the record is bound to, 10s to
	// 1h (Consul's bounds); a dead edge's record goes between one and two
	// TTLs later. Default 10s.
	SessionTTL Duration `yaml:"session_ttl" default:"10s"`
	// StaleAfter is how long without an answer from Consul the fleet's
	// numbers are trusted; past it (or at once on an error) fleet-scope
	// limits fall back to the limit divided by the last known fleet size.
	// More than 5s (the blocking query's wait). Default 10s.
	StaleAfter Duration `yaml:"stale_after" default:"10s"`
}

// ConsulRoutes bounds the routes services declare in the registry. They are
// off by default: more people can register a service than can edit this
// file. Whatever is allowed here, a declaration never takes a host the
// file's routes match (exactly or by a wildcard), nor a path the file routes
// for any host, nor the default route for hosts nobody declared.
type ConsulRoutes struct {
	// AllowedHosts are the hosts a declaration may claim: exact names or
	// "*.domain" (which also allows declared "*.sub.domain"). Default
	// empty: no declaration with edge.host is accepted.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowAnyHost accepts declarations without edge.host: they match any
	// host the file's routes do not, ahead of the default route. Default
	// false.
	AllowAnyHost bool `yaml:"allow_any_host"`
}

// ConsulRegister configures self-registration.
type ConsulRegister struct {
	// Enabled registers edge. Default false.
	Enabled bool `yaml:"enabled"`
	// Service name to register under. Default edge.
	Service string `yaml:"service" default:"edge"`
	// MetricsService is the service under which the metrics endpoint is
	// registered, for Prometheus's consul_sd_configs. Default
	// edge-metrics.
	MetricsService string `yaml:"metrics_service" default:"edge-metrics"`
	// Instance names this process in the service IDs ("edge-<instance>",
	// "edge-metrics-<instance>"), which must differ between the edges
	// registered through one agent. Default empty: the host name and the
	// admin listener's address, which no two processes on a host share
	// (the public port may be: SO_REUSEPORT).
	Instance string `yaml:"instance"`
}

// UsesConsul reports whether the config asks for a Consul client: a pool
// discovered from it, self-registration, ticket keys kept in its KV store,
// a fleet prefix, routes the registry may declare (consul.routes), or an
// explicit agent address. With a client, the registry's declarations are followed and
// shown in /status even when consul.routes admits none of them.
func (cfg *Config) UsesConsul() bool {
	r := cfg.Consul.Routes
	if cfg.Consul.Address != "" || cfg.Consul.Register.Enabled || len(r.AllowedHosts) > 0 || r.AllowAnyHost || cfg.Consul.Fleet.Prefix != "" {
		return true
	}
	for _, l := range cfg.Listeners {
		if l.TLS != nil && (l.TLS.SessionTickets.ConsulKey != "" || l.TLS.OCSP.ConsulPrefix != "") {
			return true
		}
	}
	for _, p := range cfg.Pools {
		if p.Consul.Service != "" || p.Cookie.ConsulKey != "" {
			return true
		}
	}
	return false
}

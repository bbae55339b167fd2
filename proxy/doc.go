// Package proxy is the whole path of one client connection through edge:
// the HTTP front (net/http handler per listener), routing by Host and path,
// WebSocket upgrade validation (RFC 6455 §4.2.1), the decision of who the
// client is (peer, PROXY protocol source or trusted X-Forwarded-For hop),
// admission limits, the pick (one call into balance), dialing the backend and
// completing its handshake before the client is hijacked, the splice of the
// two sockets, the registry of live connections, and graceful drain.
//
// The path of one connection, from accept to close, is told once, in
// docs/ARCHITECTURE.md ("The path of one connection"). The files that
// carry it, in the order a connection meets them:
//
//	handler.go    Handler -> ServeHTTP: drain gate, validate, client, route,
//	              admit, then serveWebSocket: dial and upgrade, hijack, splice
//	options.go    Options, Route, Pool, CookieSettings, ListenerOptions:
//	              what the caller asks for, and the defaults
//	pool.go       a Pool compiled by SetRoutes: every field effective, the
//	              balancer, limiter, admission, counter and transport
//	              resolved; the data path reads only this
//	server.go     the Server: New, SetRoutes, Close, the exchange and its log line
//	request.go    requests refused with 400 before routing (Host, target, CONNECT)
//	routes.go     Host (exact and "*.suffix") and longest path-prefix matching
//	upgrade.go    RFC 6455 §4.2.1 checks; non-upgrade requests go to http.go
//	forwarded.go  client identity and X-Forwarded-*/Forwarded headers
//	dial.go       pick, dial, backend handshake, retries, non-101 relay
//	errors.go     the one mapping from upgrade errors to the client's status
//	conn.go       wsConn: one live WebSocket, the driver interface, and the
//	              bridge both splices use to carry out what its session
//	              decides (act: the one switch on its Actions)
//	internal/wsession  the session: frame tracking both ways, limits, pings,
//	              close requests, close code and side, linger, close reason,
//	              and the decisions that end a connection (Tick, EOF,
//	              WriteFailed, Finish); no I/O, no clock, no allocation per
//	              message
//	splice.go     the goroutine splice: two directions, readiness waits
//	              without buffers, half-close
//	listener.go   WrapListener: accepted conns the splice can take over later
//	tlsrecord.go, tlsrecord_linux.go  the TLS 1.3 record layer after the
//	              upgrade: handshake log, secrets, takeover to a
//	              ready.RecordConn
//	handshakers.go  each TLS handshake started on a long-lived worker
//	              goroutine (its stack already grown), net/http's own
//	              goroutine waiting for it; bounded, falling back to
//	              net/http's goroutine
//	acceptlimit.go the cap on open client sockets, accept-error warnings
//	splice_ready_linux.go, takeover_linux.go  the readiness-driven
//	              splice's driver: no goroutine per idle connection
//	internal/ready  the readiness runtime it runs on: sockets, raw I/O,
//	              pollers, the sweeper, the record-layer connection, Frozen
//	              (Server.Run starts and stops it)
//	handoff_linux.go  Handoff and Adopt: live connections moved to another
//	              edge process; handoff_state_linux.go their state record
//	              both ways; internal/handoff is their wire and sender
//	conns.go      live-connection registry, Drain, CloseBackend, CloseConnsOn, Connections
//	closereason.go close reasons, close sides and codes (declared in
//	              wsession), refusals: the lists metrics are zero-initialised from
//	requestid.go  X-Request-Id kept from a trusted proxy or made up, for the log and backends
//	http.go       plain HTTP leg (long-polling transports) over net/http's
//	              Transport: both bodies streamed, no replays
//	proxyproto.go PROXY protocol v1/v2 listener wrapper for trusted peers
//
// The WebSocket wire format (GUID, accept key, frame header codec) and
// the permessage-deflate negotiation are internal/wswire, shared with
// health and the tests. Import rules for proxy and its internal packages
// are enforced by deps_test.go (docs/ARCHITECTURE.md, "Import rules").
//
// # Two splices
//
// A connection accepted through WrapListener, WrapListenerLimit,
// WrapListenerCount or ListenTLS (which builds the same wrapper under its
// handshake listener; cmd/edge takes one of the last two for every public
// listener) is spliced without any goroutine of its own on Linux; any other connection, and every connection elsewhere, is
// spliced by two goroutines (splice.go). Both feed the same session
// (internal/wsession) and carry out what it returns, so they keep the same behaviour:
// half-close, idle and write timeouts, close frames between two frames on
// drain, one access line and one Observer event per connection. The
// readiness-driven splice exists for memory: a parked goroutine costs at
// least 4 KiB of stack, two per connection rule out being leaner per idle
// connection than HAProxy.
//
// Readiness-driven splice. After the upgrade both sockets are taken over:
// their descriptors are duplicated, the Go conns (and their runtime poll
// descriptors) closed, and the duplicates registered edge-triggered in the
// epoll instance of one of the pollers of the readiness runtime
// (internal/ready, one per GOMAXPROCS, assigned in turn), which
// Server.Run starts and stops: its owner (cmd/edge's errgroup) runs it,
// and without it every connection takes the goroutine splice. Each poller's goroutine polls its epoll instance
// without blocking, parks in Go's own netpoller on the epoll descriptor
// while nothing is ready, and runs the connections that became readable or
// writable inline: every read and
// write is non-blocking, so a run costs only the bytes it moves. A run
// borrows an 18 KiB buffer, reads until the source would block, writes to
// the other side, and returns the buffer; an idle connection holds no
// buffer and no goroutine. One run per connection at a time (an atomic
// idle/busy/again state: whoever finds it idle runs it, others ask for one
// more run), so writes are never reordered and no wake-up is lost; a run
// moves at most 1 MiB per direction before yielding to other connections.
// The reads, writes and epoll polls of a run are raw system calls
// (internal/ready/rawio_linux.go): on a non-blocking descriptor they return at once, and skipping the runtime's
// system call bookkeeping keeps the monitor thread from handing the only
// P to another thread whenever a loopback write lasts one of its ticks.
//
// TLS. crypto/tls sees an edgeConn from the handshake on (a tls.Conn's
// transport cannot be swapped later). Until the takeover it is the
// accepted conn; afterwards its reads return a Temporary net.Error instead
// of blocking, which crypto/tls survives with its record state intact, and
// its writes never fail while the socket lives: what the socket does not
// take is queued (a queue exists only while non-empty), flushed on
// writability, and pauses the direction feeding it until it drains
// (backpressure). crypto/tls makes any write error permanent, so a
// would-block must never reach it. TLS close_notify and key updates take
// the same path; since reading a client can make crypto/tls answer it (a
// KeyUpdate that requests one), reading the client also pauses while its
// own queue is over 64 KiB, so a client that floods KeyUpdates and never
// reads is held by backpressure instead of growing the queue. Bytes crypto/tls or the PROXY reader already buffered are
// never reported by epoll: a run of both directions follows the takeover.
//
// Timeouts. The runtime's sweeper, ticking every second (or a quarter of
// the smallest idle, write, ping interval or ping timeout), asks a
// connection's session what the clock calls for (Session.Tick: idle
// longer than IdleTimeout, a queue not drained within WriteTimeout, a
// half-open client, traefik#10627) when the connection's next moment
// has come (Session.NextTick, the rest, a rate pause's end: what Sweep
// returns) or it ran since the last tick: cheaper than a timer per
// connection, the activity timestamp is stored by the data path anyway,
// and a tick costs what is due, not what is held. After a burst of new
// connections, once two seconds passed without more than a trickle of
// new ones (whatever the traffic of those up), it calls Options.Quiet:
// each TLS handshake leaves garbage the collector keeps as headroom,
// about as much as the live heap, and cmd/edge then forces one
// collection (runtime/debug.FreeOSMemory).
//
// Close order: a taken-over socket has exactly one descriptor, so closing
// it also removes it from the epoll set, and events carry connection ids
// not reused for 2^32 registrations (a slot of the poller's table and the
// registration's number), so an event for a reused descriptor number or
// slot cannot reach another connection.
//
// TLS 1.3 record layer. crypto/tls never shrinks its record buffers, so
// on the readiness splice edge owns the records of a TLS 1.3 WebSocket
// once the upgrade is done (tlsrecord.go, tlsrecord_linux.go, tls/record):
// the handshake's secrets come from the listener's key log hook
// (ListenTLS), edgeConn keeps what crypto/tls read and wrote until the
// takeover, and record.Resume replays that to continue where crypto/tls
// stopped. Reads unprotect in place in the run's buffer, writes seal into
// a borrowed one, and a quiet connection's ciphers are dropped by the
// sweeper's rest, or at the end of a run that moved no data after a
// quiet second (the heartbeat's: edge's ping, the pong to it), so an idle
// connection keeps only its keys and sequence numbers. TLS 1.2 and the
// goroutine splice keep crypto/tls.
//
// Routes from the registry (Route.Declared) form a tier of their own: a
// request is matched against the file's routes first, the declared ones
// only for a host no file route names (exactly or by a wildcard), the
// default route last. A declared route that does not compile is left out
// and never fails SetRoutes, so the registry cannot block the file's routes.
// Hosts are compared in internal/hostname's canonical form on both sides.
//
// Unknown hosts without a default route are answered 421 Misdirected Request
// (RFC 9110 §15.5.20): the request reached a server that is not configured
// for that authority, and it is never sent to an arbitrary backend.
//
// # Frame-aware mode
//
// By default the splice is opaque: client bytes are copied as they come,
// and backend bytes are only followed frame by frame (headers, never
// payloads) so that a drain close lands between two frames. A pool with
// MaxFrameBytes, MaxMessageBytes or PingInterval set turns frame-aware mode on for its
// connections; everything else keeps the opaque path. Nothing is ever
// buffered beyond the one read in flight: decisions are taken on frame
// headers.
//
// MaxFrameBytes bounds the payload length of one frame (unbounded frames
// exhaust memory, base/base#2655); MaxMessageBytes bounds the sum of the
// payload lengths of one client message's data frames (continuation
// frames included, control frames excluded) and is answered the same way
// with the access reason "message_too_big". Both count wire bytes; under
// the deflate policy DeflateLimit (the default with MaxMessageBytes) a
// client's permessage-deflate message is also counted inflated, by a
// counting inflater in internal/wsession that needs no window and holds
// nothing between messages, and the byte that would take it past
// MaxMessageBytes never reaches the backend ("message_too_big_inflated").
// The extension headers are rewritten by internal/wswire (RewriteOffer,
// RewriteAnswer): strip, a single deflate offer, window caps. Pool rates
// (RateMessages, RateBytes) are token buckets in the session (16 bytes a
// connection): a client over one gets a close 1008 "rate limited", or
// with RateSlow is not read until the bucket refills (the goroutine
// splice waits on a timer, the readiness splice leaves the client's
// readiness pending until a sweep finds the bucket refilled). Client
// frames are tracked only when one of the two is set (RFC 6455 §5.3 masked
// frames: the tracker honours the mask bit).
// At the header of a client frame over the limit, nothing more goes to the
// backend: it gets a masked close 1001 if its stream is between two
// frames, the client gets a close 1009 (message too big, RFC 6455 §7.4.1)
// at the next boundary of the backend->client stream, and the connection
// ends with a lingering close once that frame is out; the access reason is
// "frame_too_big". A
// client stream whose framing is lost is ended the same way, since its
// frames can no longer be measured. A backend frame over the limit closes
// both sockets at once (no boundary is left to send a close at), logs a
// warning, and ends with "backend_frame_too_big".
//
// PingInterval: once the client has sent nothing for that long, a ping
// with no payload (RFC 6455 §5.5.2) is sent to the client at the next
// backend->client frame boundary, the way drain close frames are; control
// frames may sit between the fragments of a message (§5.4), never inside
// a frame. Pings repeat every PingInterval of client silence, which also
// keeps idle timers of NATs and load balancers in front honest. With
// PingTimeout, a client that sends nothing at all (any byte counts) within
// PingTimeout of the first unanswered ping is sent a close 1011 at the next
// backend->client frame boundary (closed at once when none comes) and
// ends with "ping_timeout":
// that reaps half-open sockets, such as a phone that left coverage, which
// would otherwise pin a backend connection for ever (traefik#10627,
// traefik#8668). The client's pong to edge's ping ends at edge: the
// backend never asked for it, and at 100,000 connections pinged every
// 30 s forwarding it costs thousands of backend writes a second for
// nothing. A client pong is consumed when edge's ping is out and
// unanswered, every ping the backend sent (the backend->client tracker
// counts them) was followed by a client pong that went on, and the pong
// is empty (a pong carries its ping's data, §5.5.3; edge's ping has
// none), masked, final and whole in the bytes at hand at a frame
// boundary (wsession/pong.go). Every other pong goes on: one that may
// answer the backend's ping, an unsolicited one (allowed, §5.5.3), one
// whose header is split across reads (its first bytes may already have
// gone). A consumed pong still counts as a client frame (rate, limits)
// and as life for the ping timeout. Both drivers share this through
// forward (conn.go). A session adopted in a hand-off assumes a backend
// ping may be out, so the client's first pong there goes on; one whose
// client frames were not followed before (pings without limits, or
// opaque) forwards every pong, its client boundaries being unknown.
//
// Timers: the session keeps the last byte either way, the last client
// byte and the last ping as timestamps, and decides on the clock
// (wsession.Session.Tick): idle, a queue a peer does not take, a ping
// due, the ping timeout, the end of a lingering close. The readiness
// splice's sweeper asks it at the first tick (every quarter of the
// smallest of the pool's timeouts, at most a second) at or after
// Session.NextTick, or after the connection ran; the goroutine splice sets each
// reader's read deadline to the session's next moment (Session.Deadline)
// and asks it when the deadline passes.
//
// # The end of a connection
//
// conn.go. The session decides how a connection ends and hands each
// driver an Action (nothing, ping, close, half-close, linger, end) for
// what it reported: a stream's end (EOF), a failed write (WriteFailed),
// the clock (Tick), a close edge asks for (Finish). wsConn.act is the
// one switch that carries them out through the driver (the driver
// interface: write either side, wake the backend reader, half-close,
// linger, close); neither driver combines the session's state itself.
//
// # Close side and code
//
// Each WebSocket's access line and Observer.ConnCloseCode say who closed
// first and with which code: the first close frame edge saw (the
// backend's, always followed; the client's, followed only with a frame
// or message limit) or sent itself, else whose stream ended first. The
// trackers read a close frame's code from its first two payload bytes
// (RFC 6455 §5.5.1), unmasking a client's; nothing is buffered.
//
// # Hand-off
//
// handoff_linux.go. Server.Handoff moves live WebSockets to another edge
// process over a Unix stream socket; Server.Adopt, in that process,
// resumes them. Handoff's sender (handoff.Move) keeps up to 64 messages
// (64 KiB) in flight and reads their answers in order, so a hand-off
// costs each process's own work per connection rather than a round trip;
// Adopt answers each message as soon as it has read and checked it, as
// every release did.
// Besides its context, a hand-off ends when the peer answers nothing for
// 10 s: a bound on progress, so many connections or a slow host do not
// fail it. The wire is internal/handoff: per connection one message,
// a versioned, length-checked binary state record with the client's and
// the backend's socket descriptors attached (SCM_RIGHTS, unix(7)), and a
// one-byte answer. The record holds the pool name, the backend's ID and
// address, the client and peer addresses, the access-log fields (listener,
// method, host, path, request id, TLS version, start time, time to the
// 101, bytes in and out so far), the last activity, and the session
// (wsession.Session.MarshalBinary: both frame trackers' positions, close
// and linger state, heartbeat timestamps). Times are wall-clock unix
// nanoseconds; the new process resumes them against its own clock. A TLS
// 1.3 connection on edge's record layer adds a section (FlagTLS13): its
// record state (record.State.MarshalBinary: keys, IVs, secrets, sequence
// numbers, a KeyUpdate answer owed) and the start of a record already
// read, so the new process protects and unprotects from where this one
// stopped.
//
// A connection moves only while it is quiescent: Handoff takes its runner
// state (idle to busy, so no run is in progress and none starts), holds
// both sockets' locks (and a TLS client's record state), and moves it only
// if it is on the readiness splice, plain or TLS 1.3 on edge's record
// layer, with nothing queued on either socket and no bytes left in a PROXY
// reader, and not closing, lingering or half-closed. Both descriptors are
// taken out of this process's epoll set first: the duplicates keep the
// open files alive, and an epoll registration lives as long as the file,
// not the descriptor (epoll(7)). Once the peer answered, both descriptors
// are closed without shutdown(2) and without a write (close(2) of one
// duplicate does not touch the connection), and the connection is
// forgotten here: its counts given back, no access line, and
// Observer.ConnClosed with the reason "moved" (no ConnCloseCode: it did
// not close), so every ConnOpened keeps its ConnClosed. A peer that
// refuses a record, or dies, leaves the connection here, resumed; so
// does a socket that fails with the connection in flight (the peer holds
// one only once its answer is written, and written answers are read
// first). One still in flight when the deadline passes (the context
// ended, or the peer stalled) may be running in the peer already: it is
// given up here as if moved, never resumed, so no connection runs in two
// processes.
//
// Connections that cannot move (the goroutine splice, TLS on crypto/tls
// (TLS 1.2), closing, or still busy or queued once the retries' time is
// up) are sent a close 1012 (Service Restart, RFC 6455 §7.4.1) at
// their next frame boundary, the i-th of K at i*window/K: reconnects come
// at a bounded rate. Connections that already had a close scheduled (a
// drain, a departed backend) keep theirs. New requests are refused from
// the start, as during a drain; when ctx ends, what is left is closed as
// Drain does at its deadline.
//
// Adopt resumes each connection under this process's settings of the
// pool of the same name, counted against the backend of the same ID and
// address (so least-connections and max-conns stay right; stickiness is
// the client's cookie), the pool's and the server's admission counts and
// the per-client limiter (balance.Limiter.Hold: counted whatever the
// limit, without a rate token). It registers the connection (Drain,
// Connections and CloseBackend see it), adds both sockets to a poller and
// runs both directions once, since bytes that came during the move raise
// no new edge here. Its one access line is written here when it ends,
// with the original start time and the bytes of its whole life. When the
// pool or that backend is not in this process, the connection is still
// adopted (counted against a stand-in) and sent a close 1012 at its next
// frame boundary, reason "backend_gone", like a connection whose backend
// left its pool; a pool that now follows client frames the old process
// did not (a new frame or message limit: the client stream's position is
// unknown) resumes it without client limits and sends it a 1012, reason
// "restart". A record that cannot be read is refused and its descriptors
// closed; the next message is read as usual.
//
// # Lingering close
//
// Once the client was sent a close frame (edge's 1009, 1011,
// 1001, 1012, or the backend's own) the end of the connection is a
// lingering close, as RFC 6455 §7.1.1 asks and nginx does: closing a
// socket whose input is unread makes the kernel answer with a reset, and
// the client's stack drops the close frame it had received (Node ws and
// Chromium then report 1006). The backend is closed, the client's write
// half shut down after its queue (TLS close_notify, then FIN), and the
// client's input read and dropped until it closes, LingerBytes were
// dropped or LingerTimeout passed; then the client socket closes. The
// goroutine splice lingers on its client->backend goroutine (a read
// deadline at the bound). The readiness-driven splice keeps the client
// socket in epoll: runs read it raw into the pooled buffer and give the
// buffer back, and the sweeper ends a linger at its deadline, so a
// lingering connection holds neither a goroutine nor a buffer. Forced
// closes (shutdown, idle, write and fin timeouts, a dead client) do not
// linger.
package proxy

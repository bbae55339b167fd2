// Package proxy is the whole path of one client connection through edge:
// the HTTP front (net/http handler per listener), routing by Host and path,
// WebSocket upgrade validation (RFC 6455 §4.2.1), the decision of who the
// client is (peer, PROXY protocol source or trusted X-Forwarded-For hop),
// admission limits, the pick (one call into balance), dialing the backend and
// completing its handshake before the client is hijacked, the splice of the
// two sockets, the registry of live connections, and graceful drain.
//
// A reader can follow one connection from top to bottom:
//
//	server.go     Handler -> ServeHTTP: drain gate, route, validate, client, limits
//	routes.go     Host (exact and "*.suffix") and longest path-prefix matching
//	upgrade.go    RFC 6455 §4.2.1 checks; non-upgrade requests go to http.go
//	forwarded.go  client identity and X-Forwarded-*/Forwarded headers
//	dial.go       pick, dial, backend handshake, retries, non-101 relay
//	hijack.go     101 to the client, buffered bytes on both sides, splice start
//	splice.go     two directions, readiness waits without buffers, half-close
//	frame.go      RFC 6455 §5.2 frame-header tracking for boundary-safe closes
//	conns.go      live-connection registry, Drain, CloseBackend
//	http.go       plain HTTP leg (long-polling transports) over fasthttp
//	proxyproto.go PROXY protocol v1/v2 listener wrapper for trusted peers
//
// Unknown hosts without a default route are answered 421 Misdirected Request
// (RFC 9110 §15.5.20): the request reached a server that is not configured
// for that authority, and it is never sent to an arbitrary backend.
package proxy

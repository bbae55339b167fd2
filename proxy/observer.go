package proxy

import "time"

// Observer receives connection events; cmd/edge turns them into metrics.
// Methods are called on the connection's goroutine and must not block.
// The pool or route argument is the pool's name ("" before routing).
type Observer interface {
	// ConnOpened is called once a WebSocket connection is spliced, before
	// the 101 goes to the client; exactly one ConnClosed follows it.
	ConnOpened(route, backend string)
	// ConnClosed is called when a spliced connection ends; reason is the
	// access-log reason (a CloseReason), in and out count client->backend
	// and backend->client bytes.
	ConnClosed(route, backend, reason string, dur time.Duration, in, out int64)
	// DialFailed is called for every failed dial or broken backend handshake.
	DialFailed(route, backend string, err error)
	// Rejected is called when a request is answered by the proxy itself;
	// Rejections lists every status and reason.
	Rejected(route string, status int, reason string)
	// HTTPRequest is called when a plain HTTP request ends.
	HTTPRequest(route, backend string, status int, dur time.Duration)

	// Upgraded is called with the time from the request to the 101, once
	// per spliced connection, right after ConnOpened.
	Upgraded(pool string, d time.Duration)
	// ConnCloseCode is called once per spliced connection, right before
	// its ConnClosed: who closed first and with which close code, 0 when
	// no close frame was seen (docs/METRICS.md says what opaque mode sees).
	ConnCloseCode(pool string, side CloseSide, code int)
	// CloseSent is called for every close frame edge itself sent to a
	// client (1001 drain, 1009 limit, 1011 ping timeout, 1012 backend gone).
	CloseSent(pool string, code int)
	// PingSent is called for every heartbeat ping sent to a client.
	PingSent(pool string)
	// Retried is called for every further backend tried for one request
	// after a dial or handshake failure; leg is LegUpgrade or LegPlain.
	Retried(pool, leg string)
	// Deflate is called once per spliced connection whose client offered
	// compression, right after Upgraded, with what became of it: one of
	// DeflateOutcomes.
	Deflate(pool, outcome string)
	// Inflated is called once per spliced connection that counted the
	// client's compressed messages inflated (deflate policy limit), right
	// before its ConnCloseCode: their wire payload bytes and what they
	// inflated to (up to the limit).
	Inflated(pool string, wire, inflated int64)
	// RateLimited is called when a client goes over its pool's message or
	// byte rate: action RateClose (it gets a close 1008) or RateSlow (its
	// reading pauses until the bucket refills; once per pause).
	RateLimited(pool, action string)
	// TokenChecked is called once for every request of a pool with a
	// token policy that carried a token or needed one: outcome is "ok",
	// one of auth.Outcomes for a token that did not verify, or one of
	// TokenOutcomes for one refused after it verified (or was missing).
	TokenChecked(pool, outcome string)
}

// TokenOutcomes lists the outcomes of Observer.TokenChecked besides "ok"
// and auth.Outcomes: missing, revoked, valid too long, not allowed.
func TokenOutcomes() []string {
	return []string{reasonTokenMissing, reasonTokenRevoked, reasonTokenLifetime, reasonTokenForbidden}
}

// Actions of Observer.RateLimited.
const (
	RateClose = "close"
	RateSlow  = "slow"
)

// DeflateOutcomes lists the outcomes Observer.Deflate reports and the
// access log's "deflate" field shows: the pool's policy removed the offer
// (stripped), the backend did not accept it (declined), or it was
// negotiated and counted compressed (on) or inflated (limit).
func DeflateOutcomes() []string {
	return []string{deflateStripped, deflateOffered, deflatePassed, deflateCounted}
}

// Legs of a request, for Observer.Retried.
const (
	LegUpgrade = "upgrade" // a WebSocket upgrade
	LegPlain   = "plain"   // a plain HTTP request
)

// NopObserver ignores every event. It is the default Observer.
type NopObserver struct{}

var _ Observer = NopObserver{}

// ConnOpened implements Observer.
func (NopObserver) ConnOpened(string, string) {}

// ConnClosed implements Observer.
func (NopObserver) ConnClosed(string, string, string, time.Duration, int64, int64) {}

// DialFailed implements Observer.
func (NopObserver) DialFailed(string, string, error) {}

// Rejected implements Observer.
func (NopObserver) Rejected(string, int, string) {}

// HTTPRequest implements Observer.
func (NopObserver) HTTPRequest(string, string, int, time.Duration) {}

// Upgraded implements Observer.
func (NopObserver) Upgraded(string, time.Duration) {}

// ConnCloseCode implements Observer.
func (NopObserver) ConnCloseCode(string, CloseSide, int) {}

// CloseSent implements Observer.
func (NopObserver) CloseSent(string, int) {}

// PingSent implements Observer.
func (NopObserver) PingSent(string) {}

// Retried implements Observer.
func (NopObserver) Retried(string, string) {}

// Deflate implements Observer.
func (NopObserver) Deflate(string, string) {}

// Inflated implements Observer.
func (NopObserver) Inflated(string, int64, int64) {}

// RateLimited implements Observer.
func (NopObserver) RateLimited(string, string) {}

// TokenChecked implements Observer.
func (NopObserver) TokenChecked(string, string) {}

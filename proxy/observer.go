package proxy

import "time"

// Observer receives connection events; cmd/edge turns them into metrics.
// Methods are called on the connection's goroutine and must not block.
type Observer interface {
	// ConnOpened is called once a WebSocket connection is spliced, before
	// the 101 goes to the client; exactly one ConnClosed follows it.
	ConnOpened(route, backend string)
	// ConnClosed is called when a spliced connection ends; reason is the
	// access-log reason, in and out count client->backend and
	// backend->client bytes.
	ConnClosed(route, backend, reason string, dur time.Duration, in, out int64)
	// DialFailed is called for every failed dial or broken backend handshake.
	DialFailed(route, backend string, err error)
	// Rejected is called when a request is answered by the proxy itself.
	Rejected(route string, status int, reason string)
	// HTTPRequest is called when a plain HTTP request ends.
	HTTPRequest(route, backend string, status int, dur time.Duration)
}

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

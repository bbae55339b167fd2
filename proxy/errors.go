package proxy

import (
	"errors"
	"net/http"

	"github.com/edgelb/edge/balance"
)

// Errors of the upgrade leg that decide the client's answer. Each failure
// wraps one of them (or balance.ErrNoBackend, or a timeout), and
// upgradeStatus maps them to the status, in one place, the way net/http's
// reverse proxy has one error handler.
var (
	// errClientGone: the client went away while a backend was dialed;
	// nobody is left to answer.
	errClientGone = errors.New("client went away")
	// errLocalResource: edge itself lacks descriptors, buffers or memory;
	// another backend would fail the same way.
	errLocalResource = errors.New("edge short of a local resource")
	// errAnswerBroken: the backend answered a complete head, then its
	// body broke: nothing to retry.
	errAnswerBroken = errors.New("backend answer broken after its head")
	// errSlowAnswer: the backend took the request and did not answer
	// within the handshake timeout; it wraps the timeout (504).
	errSlowAnswer = errors.New("backend answer slower than the handshake timeout")
	// errAnswerUnfit: the backend's 101 is valid for the request edge sent
	// but not for a parameter only this client asked for (502, nothing
	// counted, no retry: every backend of the pool answers alike).
	errAnswerUnfit = errors.New("backend answer does not fit the client's request")
)

// upgradeStatus is the status a failed dial or backend handshake is
// answered with; answer is false when the client is gone (logged as
// "client_closed", nothing written).
func upgradeStatus(err error) (status int, answer bool) {
	switch {
	case errors.Is(err, errClientGone):
		return 0, false
	case errors.Is(err, balance.ErrNoBackend), errors.Is(err, errLocalResource), errors.Is(err, errBackendFull) && !isTimeout(err):
		return http.StatusServiceUnavailable, true
	case errors.Is(err, errAnswerBroken), errors.Is(err, errAnswerUnfit):
		return http.StatusBadGateway, true
	case isTimeout(err):
		return http.StatusGatewayTimeout, true
	}
	return http.StatusBadGateway, true
}

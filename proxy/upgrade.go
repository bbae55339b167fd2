package proxy

import (
	"encoding/base64"
	"net/http"

	"golang.org/x/net/http/httpguts"
)

// upgradeError is the ordinary HTTP answer to a malformed upgrade request.
type upgradeError struct {
	status int
	reason string // short, for the access log and Observer.Rejected
}

// wantsUpgrade reports whether the request asks for a WebSocket upgrade.
// The Upgrade header carrying the token "websocket" (any case) is the intent;
// a request without it is plain HTTP, even with "Connection: upgrade"
// (for example an h2c upgrade attempt, whose hop-by-hop headers are dropped).
func wantsUpgrade(h http.Header) bool {
	return httpguts.HeaderValuesContainsToken(h["Upgrade"], "websocket")
}

// checkUpgrade validates an upgrade request per RFC 6455 §4.2.1. It returns
// nil when the handshake may be forwarded. Tokens are compared with httpguts,
// never as whole strings: "Connection: keep-alive, Upgrade" is valid.
func checkUpgrade(r *http.Request) *upgradeError {
	if r.Method != http.MethodGet {
		// §4.2.1 item 1: the method MUST be GET.
		return &upgradeError{http.StatusMethodNotAllowed, "upgrade_method"}
	}
	if !r.ProtoAtLeast(1, 1) || r.ProtoMajor != 1 {
		return &upgradeError{http.StatusBadRequest, "upgrade_protocol"}
	}
	if !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
		return &upgradeError{http.StatusBadRequest, "upgrade_connection"}
	}
	// §4.2.2: a version we do not speak is answered 426 with the versions we
	// do speak in Sec-WebSocket-Version.
	if v := r.Header["Sec-Websocket-Version"]; len(v) != 1 || v[0] != "13" {
		return &upgradeError{http.StatusUpgradeRequired, "upgrade_version"}
	}
	if k := r.Header["Sec-Websocket-Key"]; len(k) != 1 || !validKey(k[0]) {
		return &upgradeError{http.StatusBadRequest, "upgrade_key"}
	}
	// A body would reach the backend only after its 101 (the request is
	// forwarded head first, then spliced), so a backend waiting for it
	// stalls until the handshake timeout. RFC 6455 §4.1 gives the opening
	// handshake no body: refuse one.
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return &upgradeError{http.StatusBadRequest, "upgrade_body"}
	}
	return nil
}

// validKey reports whether k is the base64 encoding of 16 bytes (§4.1 item 7).
func validKey(k string) bool {
	if len(k) != 24 {
		return false
	}
	var buf [18]byte
	n, err := base64.StdEncoding.Decode(buf[:], []byte(k))
	return err == nil && n == 16
}

// writeUpgradeError answers a failed validation as an ordinary response.
func writeUpgradeError(w http.ResponseWriter, e *upgradeError) {
	h := w.Header()
	switch e.status {
	case http.StatusUpgradeRequired:
		h.Set("Sec-WebSocket-Version", "13")
		h.Set("Upgrade", "websocket")
		h.Set("Connection", "Upgrade")
	case http.StatusMethodNotAllowed:
		h.Set("Allow", http.MethodGet)
	}
	if e.reason == "upgrade_body" {
		// The body is not read: the connection cannot carry another request.
		h.Set("Connection", "close")
	}
	http.Error(w, http.StatusText(e.status), e.status)
}

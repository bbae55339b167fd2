package record

import (
	_ "unsafe" // for go:linkname
)

// tls13Suites is crypto/tls's list of TLS 1.3 suites, which its client
// offers and its server picks from in this order. crypto/tls has no
// setting for it (the TLS 1.3 suites are not configurable), and marks it
// for linkname use; the differential tests narrow it to one suite for the
// length of a handshake, so that all three suites of RFC 8446 §B.4 are
// compared against crypto/tls, not only the one this machine prefers.
//
//go:linkname tls13Suites crypto/tls.defaultCipherSuitesTLS13
var tls13Suites []uint16

// Package testkit holds what the tests of several edge packages need
// alike: certificates (self-signed, or a CA issuing leaves), TLS-trusting
// WebSocket and HTTP clients, raw RFC 6455 upgrade and frame exchanges on
// plain sockets, loopback backends that run a function per connection, and
// bounded waits for a condition. Frames are encoded and parsed with
// internal/wswire, so the tests speak the same wire format as the code
// under test.
//
// Only _test.go files import testkit (deps_test.go enforces it): it calls
// testing's Fatal and has no place in the product.
package testkit

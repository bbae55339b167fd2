// Package tlscert makes the throwaway TLS certificate the benchmark's proxies
// serve. Every proxy under test loads the same self-signed ECDSA P-256
// certificate, so that the handshake costs they are measured on are alike;
// the generators do not verify it.
package tlscert

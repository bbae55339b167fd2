// Package auth verifies the JSON Web Tokens (RFC 7519) clients present at
// the WebSocket upgrade, and keeps what edge needs of them afterwards.
//
// A token is a JWS in the compact serialization (RFC 7515 §7.1) signed
// with RS256, ES256 (RFC 7518 §3), EdDSA over Ed25519 (RFC 8037) or
// HS256. What it refuses, and why:
//
//   - "none", and any algorithm the token's provider does not list: the
//     allow-list is the provider's, never the token's to choose;
//   - a key used for another algorithm than its own (a JWK's type fixes
//     its algorithm): an RSA public key is never taken as an HMAC secret,
//     the algorithm confusion of CVE-2015-9235;
//   - HS256 secrets from anywhere but a local file (ParseJWKS's
//     allowSecret): a secret fetched over the network is a secret shared
//     with the network;
//   - a "crit" header (RFC 7515 §4.1.11): edge understands no extension;
//   - a token without "exp": edge closes a connection when its token
//     ends, and one that never ends could not be bounded;
//   - anything longer than MaxTokenBytes, a key set larger than
//     MaxJWKSBytes, RSA keys under 2048 bits, EC points off the curve.
//
// A Verifier picks the provider by the token's issuer and checks the
// signature before any claim; a Provider's keys come from a KeySource:
// a Source fetches them from a file, a URL or the issuer's OpenID Connect
// discovery document, refreshes them in the background, keeps the last
// good keys when the issuer is down and fetches early (at most once per
// MinRefresh) when a token names a key it does not hold, so that neither
// a rotation nor a flood of unknown kids costs a fetch per request.
//
// What a live connection keeps of its token is a Mark: hashes of its
// subject and id and its issue time, 24 bytes, never the token. A
// Revocation names tokens by subject, id or issue time; CompileRevocations
// turns a list into the immutable set (Revoked) the upgrade path and the
// live connections are checked against.
//
// The package is pure apart from Source's fetches: the standard library
// alone, no state outside its values.
package auth

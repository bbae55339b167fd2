// Package tls terminates TLS for edge's listeners. It is always imported as
// edgetls:
//
//	term, err := edgetls.New(edgetls.Options{Certificates: []edgetls.CertFiles{{CertFile: "a.pem", KeyFile: "a.key"}}})
//	ln = tls.NewListener(ln, term.TLSConfig())
//	g.Go(func() error { return term.Run(ctx) }) // file polling, key rotation, OCSP
//	// on SIGHUP: err := term.Reload()
//
// A Terminator only composes three parts: the certificate store, the
// stapler that keeps the store's OCSP staples, and the session-ticket keys.
// Handshakes read them without locks. The store's writer lock is held only
// while entries change, never across a network request, so Reload (SIGHUP)
// never waits behind an OCSP responder.
//
// # Layout
//
//   - terminator.go: Terminator, New, TLSConfig, Reload, Status, Run and the
//     supervision of its loops; options.go: Options and their defaults;
//     check.go: Check; status.go: the Status types.
//   - store.go: the certificate store (certStore): loads the pairs, leaves
//     out the unusable ones, reloads on Reload and when files change, and
//     publishes the immutable set handshakes read; certs.go parses and
//     checks one pair (the chain's issuer included); sni.go chooses the
//     certificate for a ClientHello; issuer.go reads the issuer file,
//     fetches caIssuers and keeps a fetched issuer in the state directory.
//   - stapler.go: the stapler: the OCSP state of each certificate, the
//     refresh schedule, persistence and expiry, and refresh rounds in three
//     steps: scan (under the store's lock, copy what needs a staple), fetch
//     (no lock), publish (under the lock, only if the entry still serves
//     the same leaf with the same OCSP state; an answer about a replaced
//     certificate is dropped); ocsp.go: the OCSP protocol (request,
//     verification, refresh times, backoff, the staple file); share.go:
//     a fleet's shared staples (StapleShare): the store first, one edge
//     under the fleet's lock asks the responder and stores the answer,
//     every response read from the store verified like the responder's.
//   - tickets.go: the session-ticket keys (sealing, rotation, key file and
//     source) and ticketRotation, their background loop.
//   - ticketstate.go: generated keys carried to the process an upgrade
//     starts (TicketState, TicketOptions.Carried), schedule included.
//
// # Certificates
//
// Options.Certificates lists certificate/key pairs, PEM. A certificate file
// holds the leaf first, then its chain in order. A pair is refused, with an
// error naming the file and the reason, when a file is missing, holds no
// CERTIFICATE block or a bad one, when the key does not match, when the
// chain is out of order, or when its IssuerFile holds no issuer of the leaf.
//
// A pair whose leaf is expired or not yet valid is not refused but left
// out: New logs it at Error ("certificate not usable, not served"), Status
// shows it with usable false and the reason in last_error, and the other
// pairs are served, as HAProxy and nginx serve the certificates they can.
// Only when no pair at all is usable does New fail. Polling serves a not
// yet valid pair once its NotBefore passes, and new files for a left-out
// pair are read like any change. (A served pair that expires while running
// keeps being served until it is replaced.)
//
// Check runs every check New runs (the pairs, the client CA file, the ticket
// key file) without serving, fetching or asking a key source, and returns
// the refusals as Errors and the left-out pairs as Warnings (as Errors when
// none is usable); `edge -check` and edge's startup both use it.
//
// The certificate for a handshake is chosen by SNI, compared
// case-insensitively with the leaf's DNS subject alternative names: an exact
// name first, then a wildcard ("*.example.com" covers exactly one label:
// "a.example.com", not "example.com" nor "a.b.example.com"), then the
// default. The default is the first configured pair (with the other pairs
// for the same names), and serves clients that send no SNI or an unknown
// name. When several certificates fit (typically an ECDSA and an RSA one for
// the same names), the first the client supports
// (tls.ClientHelloInfo.SupportsCertificate) is served, ECDSA/Ed25519 before
// RSA, then in configuration order.
//
// GetCertificate does one atomic load of an immutable set. A reload or a new
// staple publishes a new set built from new tls.Certificate values; values
// already handed to handshakes are never modified.
//
// Reload re-reads every pair (main calls it on SIGHUP), in the same three
// steps as an OCSP refresh: read and check the files (lock held), staple a
// pair with a new leaf (no lock), swap it in (lock held); reloads run one
// at a time, and never wait for an OCSP refresh. Run polls the files
// every Options.ReloadInterval (default 2s, negative: off): a change of size
// or modification time that stays the same over one interval (so that a
// certificate and key written one after the other are read together) is
// confirmed by a digest of the contents, so a touch reloads nothing. New
// handshakes get the new pair; open connections keep theirs. A broken new
// pair is refused: the error is logged once (per distinct content), reported
// to Observer.CertReloaded, shown as last_error in Status, and the previous
// pair keeps serving. At New, any broken pair is an error.
//
// # Protocol
//
// Options.MinVersion is TLS 1.2 (default) or TLS 1.3; TLS 1.3 is always on.
// TLS 1.2 offers only ECDHE key exchange with AES-GCM or ChaCha20-Poly1305
// (forward secrecy and AEAD); TLS 1.3 suites are all AEAD. crypto/tls
// servers never renegotiate. ALPN offers "http/1.1" only.
//
// Options.Curves limits the key exchanges (nil: Go's defaults, which
// prefer the hybrid X25519MLKEM768 that current browsers send). Go only
// filters its own list by them, so New and Check refuse a list this
// process cannot negotiate at all, proved by an in-memory handshake.
//
// Options.ClientCAFile turns on mutual TLS (RequireAndVerifyClientCert
// against the PEM certificates of the file, read at New). The verified
// certificate is in the request's tls.ConnectionState; proxy names it for
// the backend, escaped per RFC 4514.
//
// # Session resumption
//
// Tickets (TLS 1.2, RFC 5077) and PSK resumption (TLS 1.3, RFC 8446 section
// 4.6) are on unless Tickets.Disabled. The tickets are sealed by this
// package (tls.Config.WrapSession/UnwrapSession) rather than with
// tls.Config.SetSessionTicketKeys, because: the keys live in one place that
// every clone of the config reads (net/http's ServeTLS and
// http2.ConfigureServer clone configs, and a clone made with
// SetSessionTicketKeys would keep its keys forever, unrotated); retired keys
// can be cleared; and the issue time sealed into each ticket bounds its age
// exactly, whatever the key source. The layout is RFC 5077 section 4's:
// key name (16 bytes) | IV | AES-256-CTR(issue time | session state) |
// HMAC-SHA256; the AES and HMAC keys are derived from each raw key with
// HKDF-SHA256.
//
// Keys come from one of:
//
//   - memory (default): a random key is made at New and a new one every
//     Tickets.RotateEvery (default 1h) in Run; the newest Tickets.Keep
//     (default 3) keys are accepted, the newest encrypts, and older keys are
//     cleared from memory. Each process has its own keys, so a fleet behind
//     a layer-4 balancer resumes only on the node that issued the ticket.
//   - Tickets.KeyFile: a file the operator distributes to every node. The
//     format is HAProxy's tls-ticket-keys: one key per line, base64
//     (standard alphabet) of 48 or 80 random bytes (`openssl rand -base64
//     80`); blank lines and lines starting with '#' are ignored; at most 64
//     keys. As with nginx's ssl_session_ticket_key, the first key encrypts
//     and all are accepted. Rotate by rewriting the file with the new key
//     first and the previous ones after it. Run re-reads it every
//     ReloadInterval; a broken file keeps the keys in use (the error is
//     logged once and shown in Status), and at New it is an error. The
//     tickets are not readable by HAProxy or nginx (the session format
//     differs): only the file format is shared.
//   - Tickets.Source: any TicketKeySource, polled like the file; cmd/edge
//     builds one over fleet.TicketKeys (Consul KV, rotated by the fleet
//     itself) and parses its value with ParseTicketKeys.
//
// Ticket lifetime: a ticket is accepted while the key that sealed it is
// among the accepted keys and for at most RotateEvery*Keep after it was
// issued (never more than 7 days, the limit of RFC 8446 section 4.6.1 that
// crypto/tls also enforces). With generated keys that means between
// (Keep-1)*RotateEvery and Keep*RotateEvery after issue: 2h to 3h with the
// defaults. With a key file or source, RotateEvery*Keep is the age bound and
// the operator's rotation decides the rest. crypto/tls announces a 7-day
// lifetime in TLS 1.3 NewSessionTicket messages whatever the bound, and a
// server cannot change it (Go 1.26: sendSessionTickets in
// crypto/tls/handshake_server_tls13.go sets ticket_lifetime to the constant
// maxSessionTicketLifetime of crypto/tls/common.go; neither tls.Config nor WrapSession
// reaches it; TLS 1.2 tickets carry a lifetime hint of 0, "unspecified",
// RFC 5077 section 3.3). A client presenting an older ticket simply gets a
// full handshake. TestTLS13TicketLifetimeHint pins the 7 days, so that a Go
// release that lets servers choose is noticed. A resumed
// connection receives a fresh ticket under the current key.
//
// # OCSP stapling
//
// For every certificate whose leaf names an OCSP responder (AIA) and whose
// issuer is known, New fetches a response before the first handshake (HTTP POST, RFC 6960 appendix A,
// bounded by OCSP.Timeout, default 5s), unless a persisted one is still
// fresh.
//
// The issuer is, in order: the certificate of CertFiles.IssuerFile (PEM, a
// bundle allowed) that signed the leaf (HAProxy's ".issuer" file, nginx's
// ssl_trusted_certificate); the certificate after the leaf in CertFile;
// else it is fetched from the leaf's caIssuers URLs (AIA, RFC 5280 section
// 4.2.2.1), which private CAs that sign leaves directly often set and
// operators who deploy the leaf alone rely on. Only http and https URLs are
// fetched (GET, bounded by OCSP.Timeout and 64 KiB; DER or PEM, PKCS#7 not
// understood), and what they serve is kept only if its key signed the leaf.
// The fetch is part of the OCSP refresh (retried with its backoff); with
// StateDir the fetched issuer is kept in StateDir/issuer-<id>.der, checked
// again when read. A leaf with a responder and no way to its issuer is
// served without a staple (state "no-issuer", a warning). A response is stapled only if it is signed by the issuer, or by a
// responder certificate the issuer signed with the OCSPSigning extended key
// usage (RFC 6960 section 4.2.2.2), is for the leaf's serial number, has a
// ThisUpdate not in the future (5 minutes of skew allowed), is not past its
// NextUpdate (a response without NextUpdate is kept 24h), and says "good".
//
// Refresh happens at half the validity, clamped between 1 minute (less when
// the staple expires sooner) and 12 hours. After a failure the last good
// staple keeps being served until its NextUpdate, and the next attempt comes
// after an exponential backoff (1 minute doubling to 1 hour, +-25% jitter,
// and before the staple expires); at NextUpdate an unrenewed staple is
// removed: an expired response is never stapled. A "revoked" answer is
// logged at Error, shown in Status and reported to Observer, and the
// certificate is served without a staple (replace it); "unknown" is a
// warning. Neither is ever stapled.
//
// With Options.StateDir, the last good response of each certificate is kept
// in StateDir/ocsp-<first 16 bytes of SHA-256 of the leaf, hex>.der and
// verified again when loaded, so a restart staples from the first handshake
// even while the responder is down.
//
// A certificate that names no responder is normal (many CAs, Let's Encrypt
// among them, have stopped OCSP): it is served without a staple, with at
// most a debug log. OCSP.Disabled turns stapling off.
//
// Must-staple certificates (TLS Feature extension, RFC 7633, with
// status_request) follow OCSP.MustStaple:
//
//   - "refuse" (default): the certificate is served only with a valid
//     staple. Without one, the handshake uses another certificate for the
//     name (another key type, or a wildcard), else fails. A must-staple pair
//     that could never be stapled (no responder, no issuer in the chain nor
//     IssuerFile nor caIssuers URL, OCSP disabled) is refused when loaded.
//   - "serve": the certificate is served with or without a staple; Status
//     shows served, must_staple and stapled.
//
// # Background work, events and status
//
// Run polls the files, rotates generated keys or polls the key source, and
// refreshes staples (one refresh round at a time; a responder that does not
// answer, bounded by OCSP.Timeout, holds up only the staples of its round,
// never Reload nor handshakes); it returns when its context ends, after every goroutine
// it started has returned, and restarts a loop that panicked after a pause.
// Options.Observer (nil: none) receives CertReloaded, OCSPRefreshed and
// TicketKeysRotated after the change is served; handshake counts are left to
// the caller (tls.ConnectionState.DidResume). Status reports every pair
// (names, files, validity, last error, staple state and next refresh) and
// the ticket key generations, never key material. Options.Logger (nil:
// slog.Default()) gets the logs; Options.Now (nil: time.Now) is the clock,
// also used as tls.Config.Time.
package tls

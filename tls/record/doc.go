// Package record is edge's TLS 1.3 record layer for the time after the
// handshake. crypto/tls does the handshake (certificates, tickets, OCSP,
// ALPN); from then on edge protects and unprotects records itself, so that
// an idle connection holds only its traffic secrets, keys, ivs and
// sequence numbers (a 280-byte State, 288 bytes of heap once Idle has
// dropped the AEADs), instead of crypto/tls's record buffers, which stay
// at their largest size for the connection's life.
//
// The package is pure: no I/O, no goroutines, no clock (KeyLog takes its
// clock as a function). It is the server side only.
//
//	s, err := record.New(suite, clientSecret, serverSecret) // or record.Resume from crypto/tls's socket logs
//	plain, used, err := s.Open(buf)  // in place; buf[used:] is the next, incomplete record
//	out = s.Seal(out[:0], data)      // a pending KeyUpdate answer goes first
//	s.Idle()                         // the connection went quiet: drop the AEADs
//
// # What is done (RFC 8446)
//
//   - §5.2, §5.3: AEAD with the per-record nonce (iv XOR the 64-bit
//     sequence number), the record header as additional data, decrypting
//     in place. Suites of §B.4: TLS_AES_128_GCM_SHA256,
//     TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256; New refuses any
//     other, and the caller keeps crypto/tls.
//   - §5.1, §5.2, §5.4: the record size limits (record_overflow for more
//     than 2^14+256 bytes of ciphertext, more than 2^14+1 bytes of inner
//     plaintext or 2^14 of content), legacy_record_version 0x0303
//     (protocol_version otherwise, as crypto/tls), the inner content type
//     and zero padding, an inner plaintext without a content type
//     (unexpected_message), zero-length application data (legal).
//   - §5: change_cipher_spec after the handshake is unexpected_message.
//     Handshake messages may span records but not be interleaved with
//     other records, and a KeyUpdate, which changes the key, must end its
//     record (§5.1); the only handshake message a client may send is
//     KeyUpdate (§4.6.3): others are unexpected_message, a bad length
//     decode_error, a bad request_update illegal_parameter.
//   - §4.6.3, §7.2: KeyUpdate both ways. A client's update switches the
//     read key; update_requested makes one answer pending however many
//     requests came (a flood does not grow the state), sent by the next
//     Seal before any data, then the write key switches.
//   - §5.5: Seal updates its own key before 2^24 records under one key
//     (AES-GCM's limit is 2^24.5), so the write sequence number never
//     nears a wrap; a read sequence number that would wrap (§5.3) is an
//     error.
//   - §6: close_notify ends reading with io.EOF; another alert from the
//     client is a *PeerAlertError; user_canceled is dropped, as crypto/tls,
//     BoringSSL, NSS and Rustls do. SealAlert sends an alert.
//   - §7.1, §7.3: HKDF-Expand-Label ("tls13 " prefix) for key, iv and
//     "traffic upd".
//
// Where crypto/tls (Go 1.26) and RFC 8446 disagree, Open follows the RFC,
// and TestDifferentialTampered lists each case: a change_cipher_spec after
// the handshake, plaintext or protected (crypto/tls drops it), an empty
// inner plaintext (crypto/tls takes it as empty application data), a
// KeyUpdate with request_update other than 0 or 1 (illegal_parameter,
// where crypto/tls says decode_error). Open does not limit runs of
// "non-advancing" records (empty records, KeyUpdates) as crypto/tls does
// at 16: they cost the sender as much as the receiver and grow nothing.
//
// # Taking over from crypto/tls
//
// The application traffic secrets come from tls.Config.KeyLogWriter:
// KeyLog keeps them per client random (bounded in age and count) until
// Take, and ClientRandom reads the random off the front of the
// connection's read log.
//
// The trade-off, plainly: crypto/tls documents KeyLogWriter as a
// debugging hook that "compromises security" because it is meant to
// write secrets to a file (SSLKEYLOGFILE for Wireshark). Here nothing is
// written anywhere: the secrets, which crypto/tls holds in memory for the
// connection's life anyway, are parsed from the NSS key log lines into
// KeyLog, kept at most keyLogAge and keyLogEntries, and cleared when
// taken or forgotten. The costs are that the hook is taken (a config
// with its own KeyLogWriter is refused by proxy.ListenTLS, so an
// operator's key log cannot be had at the same time), one formatted line
// per secret per handshake, and a dependence on the NSS labels
// (CLIENT_TRAFFIC_SECRET_0, SERVER_TRAFFIC_SECRET_0), which crypto/tls
// has written since TLS 1.3 landed (Go 1.12). Should they change, Take
// finds nothing and the connection stays with crypto/tls: Resume never
// runs on secrets it cannot authenticate.
//
// crypto/tls's other source of secrets, the QUIC events
// (tls.QUICServer, QUICSetReadSecret and QUICSetWriteSecret, Go 1.21)
// could not be used: a QUICConn runs the handshake without TLS records
// (QUIC carries handshake messages in CRYPTO frames), so edge would have
// to frame, protect and replay every handshake record itself; it demands
// the quic_transport_parameters extension (RFC 9001 §8.2), which no TCP
// client sends or accepts; and it follows QUIC's rules instead of TLS
// over TCP's (no KeyUpdate message, §6; no middlebox compatibility
// change_cipher_spec, §8.4). It serves a QUIC stack, not a tls.Conn. Resume then replays the bytes crypto/tls read and
// wrote: records before the first one that authenticates under the
// application key at sequence 0 are the handshake's; the rest go through
// the same state machine as Open, so tickets, data and KeyUpdates crypto/tls
// handled are followed to the sequence numbers and key generation it
// reached. A read log without a record that authenticates under the
// client secret is refused: the client chooses its random, so secrets
// found under it may be another handshake's. ResumeKeeping also returns the application data crypto/tls
// read but did not deliver. MarshalBinary and UnmarshalBinary hand a State to another
// process (versioned, length- and consistency-checked).
//
// # Concurrency
//
// Open and Seal may run at the same time, one reader and one writer:
// they share only the pending-answer flag, which is atomic. Idle,
// SealAlert, MarshalBinary and UnmarshalBinary need the caller's
// exclusion.
//
// # Not done
//
// TLS 1.2 (its connections stay with crypto/tls), 0-RTT early data (edge
// does not accept it), post-handshake client authentication (§4.6.2: edge
// never requests it, so a client's Certificate is unexpected_message),
// NewSessionTicket sent after the takeover (crypto/tls sends the tickets
// during the handshake), the client side, and record padding on Seal.
package record

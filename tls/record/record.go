package record

import (
	"fmt"
	"io"
	"math"
	"sync/atomic"
)

// MaxRecord is the largest TLS 1.3 record on the wire: the 5-byte header and
// at most 2^14+256 bytes of encrypted_record (RFC 8446 §5.2).
const MaxRecord = headerLen + maxCiphertext

const (
	headerLen     = 5
	maxPlaintext  = 1 << 14            // RFC 8446 §5.1
	maxCiphertext = maxPlaintext + 256 // RFC 8446 §5.2
	// keyUpdateRecord is the size of a record carrying one KeyUpdate:
	// header, 4-byte handshake header, request_update, content type, tag.
	keyUpdateRecord = headerLen + 4 + 1 + 1 + tagLen
	recordOverhead  = headerLen + 1 + tagLen

	// writeLimit is how many records one write key protects at most. RFC
	// 8446 §5.5 allows AES-GCM 2^24.5 full-size records per key; 2^24 keeps
	// a margin, and the same bound for ChaCha20-Poly1305 costs one
	// KeyUpdate per 256 GiB.
	writeLimit = 1 << 24
)

// Content types (RFC 8446 §5.1, §B.1) and the handshake types edge meets after the handshake (§4, §B.3).
const (
	typeChangeCipherSpec = 20
	typeAlert            = 21
	typeHandshake        = 22
	typeApplicationData  = 23

	handshakeNewSessionTicket = 4
	handshakeKeyUpdate        = 24
)

// Alert descriptions (RFC 8446 §6) that Open reports in AlertError.Alert.
const (
	AlertCloseNotify       uint8 = 0
	AlertUnexpectedMessage uint8 = 10
	AlertBadRecordMAC      uint8 = 20
	AlertRecordOverflow    uint8 = 22
	AlertIllegalParameter  uint8 = 47
	AlertDecodeError       uint8 = 50
	AlertProtocolVersion   uint8 = 70
	AlertInternalError     uint8 = 80
	AlertUserCanceled      uint8 = 90
)

// AlertError is a violation of RFC 8446 by the peer. Alert is the alert to
// send it (SealAlert) before closing; the State is dead.
type AlertError struct {
	Alert  uint8
	Reason string
}

func (e *AlertError) Error() string {
	return fmt.Sprintf("tls record: %s (alert %s)", e.Reason, alertName(e.Alert))
}

// PeerAlertError is a fatal alert the peer sent (RFC 8446 §6.2). Nothing is
// sent back; the connection is closed.
type PeerAlertError struct {
	Alert uint8
}

func (e *PeerAlertError) Error() string {
	return "tls record: peer sent alert " + alertName(e.Alert)
}

func alertName(a uint8) string {
	names := map[uint8]string{
		0: "close_notify", 10: "unexpected_message", 20: "bad_record_mac", 22: "record_overflow",
		40: "handshake_failure", 42: "bad_certificate", 47: "illegal_parameter", 50: "decode_error",
		51: "decrypt_error", 70: "protocol_version", 80: "internal_error", 90: "user_canceled",
	}
	if n, ok := names[a]; ok {
		return fmt.Sprintf("%s (%d)", n, a)
	}
	return fmt.Sprintf("%d", a)
}

func violation(alert uint8, format string, args ...any) error {
	return &AlertError{Alert: alert, Reason: fmt.Sprintf(format, args...)}
}

// State is the TLS 1.3 record layer of one server-side connection after the
// handshake. Open and Seal may run at the same time (one reader, one
// writer): they share only the pending flag, which is atomic. Everything
// else (Idle, MarshalBinary, UnmarshalBinary, SealAlert against Seal) needs
// the caller's exclusion.
type State struct {
	read, write dir
	err         error // read side: the error Open returns from now on (io.EOF after close_notify)

	// A handshake message being received (RFC 8446 §5.1 lets one span
	// records): its header as far as it came, then how many body bytes
	// remain.
	hsLeft uint32
	hsHdr  [4]byte
	// pending: a KeyUpdate answer (update_not_requested) waits to go out.
	// The fields from here are ordered to leave no padding: the State of
	// an idle connection is 208 bytes, exactly its size class.
	pending atomic.Bool
	suite   uint16
	hsHave  uint8

	peerIsServer bool // the client's view (tests and the replay of the write log): NewSessionTicket is legal
}

// New returns the record state after the handshake from the application
// traffic secrets (RFC 8446 §7.1 client_application_traffic_secret_0 and
// server_application_traffic_secret_0), both sequence numbers 0. A suite
// other than the three of RFC 8446 §B.4 is an error: the caller keeps
// crypto/tls.
func New(suite uint16, clientSecret, serverSecret []byte) (*State, error) {
	s := &State{}
	if err := s.init(suite, clientSecret, serverSecret); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *State) init(suite uint16, clientSecret, serverSecret []byte) error {
	hashLen, _, ok := suiteParams(suite)
	if !ok {
		return fmt.Errorf("%w %#04x", errSuite, suite)
	}
	if len(clientSecret) != hashLen || len(serverSecret) != hashLen {
		return fmt.Errorf("tls record: traffic secrets of %d and %d bytes for suite %#04x, want %d",
			len(clientSecret), len(serverSecret), suite, hashLen)
	}
	s.suite = suite
	s.read.setSecret(suite, clientSecret)
	s.write.setSecret(suite, serverSecret)
	return nil
}

// Open unprotects the complete records at the front of buf in place (RFC
// 8446 §5.2: nonce = iv XOR seq, additional data = the record header, inner
// content type and zero padding stripped). It returns the application data
// of those records compacted to the front of buf (plain aliases buf) and
// used, the bytes of whole records consumed; buf[used:] is an incomplete
// record to pass again with more bytes behind it.
//
// A KeyUpdate from the client switches the read key; with update_requested
// it makes one answer pending (Pending, Seal), however many requests came.
// After close_notify, Open returns the data before it and io.EOF, then io.EOF
// for ever. A violation returns *AlertError, a fatal alert from the client
// *PeerAlertError; plain then holds the data of the records before the bad
// one, and every later call returns the same error.
func (s *State) Open(buf []byte) (plain []byte, used int, err error) {
	if s.err != nil {
		return buf[:0], 0, s.err
	}
	n := 0
	for len(buf)-used >= headerLen {
		rest := buf[used:]
		if rest[1] != 3 || rest[2] != 3 {
			// RFC 8446 §5.1: legacy_record_version is 0x0303 on every record
			// after the ClientHello; crypto/tls sends protocol_version.
			return buf[:n], used, s.fail(violation(AlertProtocolVersion, "record version %#04x, want 0x0303", uint16(rest[1])<<8|uint16(rest[2])))
		}
		l := bodyLen(rest)
		if l > maxCiphertext {
			return buf[:n], used, s.fail(violation(AlertRecordOverflow, "record of %d bytes, the limit is %d (RFC 8446 §5.2)", l, maxCiphertext))
		}
		if rest[0] == typeChangeCipherSpec {
			// RFC 8446 §5: a change_cipher_spec is dropped only before the
			// peer's Finished; after it, unexpected_message. (crypto/tls
			// drops it at any time.)
			return buf[:n], used, s.fail(violation(AlertUnexpectedMessage, "change_cipher_spec after the handshake (RFC 8446 §5)"))
		}
		if len(rest) < headerLen+l {
			break
		}
		data, eof, err := s.openRecord(rest[:headerLen+l])
		if err != nil {
			return buf[:n], used, s.fail(err)
		}
		n += copy(buf[n:], data)
		used += headerLen + l
		if eof {
			s.err = io.EOF
			return buf[:n], used, io.EOF
		}
	}
	return buf[:n], used, nil
}

func (s *State) fail(err error) error {
	s.err = err
	return err
}

// openRecord opens one complete protected record and returns its
// application data (aliasing rec), or eof at close_notify.
func (s *State) openRecord(rec []byte) (data []byte, eof bool, err error) {
	if s.read.seq == math.MaxUint64 {
		// RFC 8446 §5.3: a sequence number must not wrap; the client had to
		// update its key long before.
		return nil, false, violation(AlertUnexpectedMessage, "read sequence number would wrap (RFC 8446 §5.3)")
	}
	inner, ok := s.read.open(s.suite, rec)
	if !ok {
		// Another outer type fails here too: the header is the additional
		// data, so crypto/tls and this agree on bad_record_mac.
		return nil, false, violation(AlertBadRecordMAC, "record %d does not authenticate", s.read.seq)
	}
	if rec[0] != typeApplicationData {
		// RFC 8446 §5.2: the outer type of a protected record is always application_data.
		return nil, false, violation(AlertUnexpectedMessage, "protected record of outer type %d", rec[0])
	}
	if len(inner) > maxPlaintext+1 {
		return nil, false, violation(AlertRecordOverflow, "inner plaintext of %d bytes, the limit is %d (RFC 8446 §5.4)", len(inner), maxPlaintext+1)
	}
	// RFC 8446 §5.4: the content type is the last non-zero byte.
	i := len(inner) - 1
	for i >= 0 && inner[i] == 0 {
		i--
	}
	if i < 0 {
		return nil, false, violation(AlertUnexpectedMessage, "inner plaintext without a content type (RFC 8446 §5.4)")
	}
	typ, data := inner[i], inner[:i]
	if s.hsHave > 0 && typ != typeHandshake {
		return nil, false, violation(AlertUnexpectedMessage, "record of type %d inside a handshake message (RFC 8446 §5.1)", typ)
	}
	switch typ {
	case typeApplicationData:
		// Zero-length application data is legal (RFC 8446 §5.1) and carries nothing.
		return data, false, nil
	case typeHandshake:
		if len(data) == 0 {
			return nil, false, violation(AlertUnexpectedMessage, "zero-length handshake record (RFC 8446 §5.1)")
		}
		return nil, false, s.handshake(data)
	case typeAlert:
		eof, err := s.alert(data)
		return nil, eof, err
	}
	return nil, false, violation(AlertUnexpectedMessage, "inner content type %d after the handshake", typ)
}

// alert handles an alert record: close_notify ends the read side (eof);
// user_canceled is dropped, as crypto/tls, BoringSSL, NSS and Rustls do in
// TLS 1.3 (it is misused as a warning, https://bugs.openjdk.org/browse/JDK-8323517);
// any other alert is fatal (RFC 8446 §6.2).
func (s *State) alert(data []byte) (eof bool, err error) {
	if len(data) != 2 {
		return false, violation(AlertUnexpectedMessage, "alert record of %d bytes", len(data))
	}
	switch data[1] {
	case AlertCloseNotify:
		return true, nil
	case AlertUserCanceled:
		return false, nil
	}
	return false, &PeerAlertError{Alert: data[1]}
}

// handshake consumes the handshake bytes of one record. The client may send
// only KeyUpdate after the handshake (RFC 8446 §4.6.3; post-handshake
// authentication is never requested, §4.6.2). A message may span records,
// but a KeyUpdate changes the key and must end its record (§5.1).
func (s *State) handshake(data []byte) error {
	for len(data) > 0 {
		if s.hsHave < 4 {
			k := copy(s.hsHdr[s.hsHave:], data)
			s.hsHave += uint8(k)
			data = data[k:]
			if s.hsHave < 4 {
				if err := s.checkHandshakeType(); err != nil {
					return err
				}
				return nil
			}
			if err := s.handshakeHeader(); err != nil {
				return err
			}
			continue
		}
		if s.hsHdr[0] == handshakeKeyUpdate {
			return s.keyUpdate(data)
		}
		// A NewSessionTicket in the client's view: skipped.
		k := uint32(min(len(data), int(s.hsLeft)))
		data = data[k:]
		if s.hsLeft -= k; s.hsLeft == 0 {
			s.endMessage()
		}
	}
	return nil
}

func (s *State) checkHandshakeType() error {
	t := s.hsHdr[0]
	if t == handshakeKeyUpdate || t == handshakeNewSessionTicket && s.peerIsServer {
		return nil
	}
	return violation(AlertUnexpectedMessage, "handshake message of type %d after the handshake", t)
}

func (s *State) handshakeHeader() error {
	if err := s.checkHandshakeType(); err != nil {
		return err
	}
	l := uint32(s.hsHdr[1])<<16 | uint32(s.hsHdr[2])<<8 | uint32(s.hsHdr[3])
	if s.hsHdr[0] == handshakeKeyUpdate && l != 1 {
		return violation(AlertDecodeError, "KeyUpdate of %d bytes, want 1 (RFC 8446 §4.6.3)", l)
	}
	s.hsLeft = l
	if l == 0 {
		s.endMessage()
	}
	return nil
}

// endMessage forgets the handshake message just completed.
func (s *State) endMessage() {
	s.hsHave, s.hsLeft, s.hsHdr = 0, 0, [4]byte{}
}

// keyUpdate takes the request_update byte of a KeyUpdate and switches the
// read key (RFC 8446 §4.6.3, §7.2).
func (s *State) keyUpdate(data []byte) error {
	req := data[0]
	if req > 1 {
		return violation(AlertIllegalParameter, "KeyUpdate request_update %d (RFC 8446 §4.6.3)", req)
	}
	if len(data) > 1 {
		return violation(AlertUnexpectedMessage, "KeyUpdate not at the end of its record (RFC 8446 §5.1)")
	}
	s.endMessage()
	s.read.next(s.suite)
	if req == 1 {
		s.pending.Store(true)
	}
	return nil
}

// Pending reports whether a KeyUpdate answer waits to go out with the next Seal.
func (s *State) Pending() bool { return s.pending.Load() }

// Seal appends to dst the records carrying p, at most 2^14 bytes each
// (RFC 8446 §5.1), preceded by the pending KeyUpdate answer if any, after
// which the write key switches (§4.6.3). Seal(dst, nil) sends just a
// pending answer, or nothing. Before the write sequence number reaches
// writeLimit, Seal sends its own KeyUpdate (update_not_requested) and
// switches keys (§5.5), so it never wraps. Seal does not allocate when
// cap(dst)-len(dst) >= len(p)+Overhead(len(p)). p must not overlap
// dst[len(dst):cap(dst)].
func (s *State) Seal(dst, p []byte) []byte {
	dst = grow(dst, len(p)+s.Overhead(len(p)))
	if s.pending.CompareAndSwap(true, false) {
		dst = s.sealKeyUpdate(dst, false)
	}
	for len(p) > 0 {
		if s.write.seq >= writeLimit-1 {
			dst = s.sealKeyUpdate(dst, false)
		}
		n := min(len(p), maxPlaintext)
		dst = s.write.seal(s.suite, dst, typeApplicationData, p[:n])
		p = p[n:]
	}
	return dst
}

// sealKeyUpdate sends a KeyUpdate under the current write key, then
// switches to the next generation (RFC 8446 §4.6.3).
func (s *State) sealKeyUpdate(dst []byte, requested bool) []byte {
	msg := [5]byte{handshakeKeyUpdate, 0, 0, 1, 0}
	if requested {
		msg[4] = 1
	}
	dst = s.write.seal(s.suite, dst, typeHandshake, msg[:])
	s.write.next(s.suite)
	return dst
}

// SealAlert appends an alert record (RFC 8446 §6): close_notify and
// user_canceled at warning level, any other alert fatal. Nothing may be
// sealed after it.
func (s *State) SealAlert(dst []byte, alert uint8) []byte {
	level := byte(2)
	if alert == AlertCloseNotify || alert == AlertUserCanceled {
		level = 1
	}
	if s.write.seq >= writeLimit-1 {
		dst = s.sealKeyUpdate(dst, false)
	}
	msg := [2]byte{level, alert}
	return s.write.seal(s.suite, dst, typeAlert, msg[:])
}

// Overhead returns an upper bound of the bytes Seal adds to n bytes of
// plaintext: a header, content type and tag per record, a pending KeyUpdate
// answer, and the KeyUpdates of the write limit.
func (s *State) Overhead(n int) int {
	recs := (n + maxPlaintext - 1) / maxPlaintext
	return recs*recordOverhead + keyUpdateRecord*(2+recs/(writeLimit/2))
}

// Idle drops the AEADs (key schedules, GHASH tables) and keeps the
// secrets, keys, ivs and sequence numbers; the next Open or Seal rebuilds
// them. Not concurrent with Open or Seal.
func (s *State) Idle() {
	s.read.aead = nil
	s.write.aead = nil
}

// Ciphers reports whether either direction holds its AEAD: false from
// Idle until the next Open or Seal. Not concurrent with them.
func (s *State) Ciphers() bool { return s.read.aead != nil || s.write.aead != nil }

// bodyLen is the length field of the record header at the front of b.
func bodyLen(b []byte) int { return int(b[3])<<8 | int(b[4]) }

package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// marshalVersion is the first byte of MarshalBinary's output. A change of
// layout takes a new version; UnmarshalBinary refuses versions it does not know.
const marshalVersion = 1

const (
	flagPending = 1 << iota
	flagClosed
	flagPeerIsServer
	flagsKnown = flagPending | flagClosed | flagPeerIsServer
)

// MarshalBinary encodes the whole state for handing a live connection to
// another process: version, suite, flags (pending answer, read side closed),
// the handshake message being received, and for each direction the traffic
// secret, key, iv and sequence number. The output holds secrets: it must
// travel only over a channel as trusted as the process's memory. A dead
// state (Open returned an alert error) is not marshalled.
func (s *State) MarshalBinary() ([]byte, error) {
	var flags byte
	switch {
	case s.err == nil:
	case s.err == io.EOF:
		flags |= flagClosed
	default:
		return nil, fmt.Errorf("tls record: marshalling a dead state: %w", s.err)
	}
	if s.pending.Load() {
		flags |= flagPending
	}
	if s.peerIsServer {
		flags |= flagPeerIsServer
	}
	hashLen, keyLen, ok := suiteParams(s.suite)
	if !ok {
		return nil, errors.New("tls record: marshalling a state without a suite")
	}
	b := make([]byte, 0, marshalLen(hashLen, keyLen))
	b = append(b, marshalVersion)
	b = binary.BigEndian.AppendUint16(b, s.suite)
	b = append(b, flags, s.hsHave)
	b = append(b, s.hsHdr[:]...)
	b = binary.BigEndian.AppendUint32(b, s.hsLeft)
	for _, d := range []*dir{&s.read, &s.write} {
		b = append(b, d.secret[:hashLen]...)
		var key [maxKey]byte
		b = append(b, d.deriveKey(s.suite, &key)...)
		clear(key[:])
		b = append(b, d.iv[:]...)
		b = binary.BigEndian.AppendUint64(b, d.seq)
	}
	return b, nil
}

func marshalLen(hashLen, keyLen int) int {
	return 1 + 2 + 1 + 1 + 4 + 4 + 2*(hashLen+keyLen+ivLen+8)
}

// UnmarshalBinary restores a state MarshalBinary encoded. It checks the
// version, the exact length for the suite, the flags, the handshake
// message state, that each key and iv is the one its secret derives and
// that the write sequence number is within the write limit; on error s is
// unchanged.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) < 3 || b[0] != marshalVersion {
		return errors.New("tls record: unmarshal: unknown version")
	}
	suite := binary.BigEndian.Uint16(b[1:])
	hashLen, keyLen, ok := suiteParams(suite)
	if !ok {
		return fmt.Errorf("tls record: unmarshal: %w %#04x", errSuite, suite)
	}
	if len(b) != marshalLen(hashLen, keyLen) {
		return fmt.Errorf("tls record: unmarshal: %d bytes, want %d", len(b), marshalLen(hashLen, keyLen))
	}
	var t State
	t.suite = suite
	flags := b[3]
	if flags&^flagsKnown != 0 {
		return fmt.Errorf("tls record: unmarshal: unknown flags %#02x", flags)
	}
	t.peerIsServer = flags&flagPeerIsServer != 0
	t.hsHave = b[4]
	copy(t.hsHdr[:], b[5:9])
	t.hsLeft = binary.BigEndian.Uint32(b[9:13])
	if err := t.checkHandshakeState(); err != nil {
		return err
	}
	p := b[13:]
	for _, d := range []*dir{&t.read, &t.write} {
		d.setSecret(suite, p[:hashLen])
		var key [maxKey]byte
		same := bytes.Equal(d.deriveKey(suite, &key), p[hashLen:hashLen+keyLen])
		clear(key[:])
		if !same || !bytes.Equal(d.iv[:], p[hashLen+keyLen:hashLen+keyLen+ivLen]) {
			return errors.New("tls record: unmarshal: key or iv does not derive from the secret")
		}
		p = p[hashLen+keyLen+ivLen:]
		d.seq = binary.BigEndian.Uint64(p)
		p = p[8:]
	}
	if t.write.seq >= writeLimit {
		return fmt.Errorf("tls record: unmarshal: write sequence number %d beyond the limit %d", t.write.seq, writeLimit)
	}
	if flags&flagClosed != 0 {
		t.err = io.EOF
	}
	*s = State{read: t.read, write: t.write, err: t.err, hsLeft: t.hsLeft, hsHdr: t.hsHdr, hsHave: t.hsHave, suite: t.suite, peerIsServer: t.peerIsServer}
	s.pending.Store(flags&flagPending != 0)
	return nil
}

// checkHandshakeState accepts only a state handshake could have left.
func (s *State) checkHandshakeState() error {
	bad := errors.New("tls record: unmarshal: impossible handshake message state")
	switch {
	case s.hsHave > 4:
		return bad
	case s.hsHave == 0:
		if s.hsLeft != 0 || s.hsHdr != [4]byte{} {
			return bad
		}
		return nil
	}
	if s.checkHandshakeType() != nil {
		return bad
	}
	if s.hsHdr[0] == handshakeKeyUpdate {
		// The length bytes received so far are a prefix of 0, 0, 1.
		for i := 1; i < int(s.hsHave); i++ {
			if s.hsHdr[i] != [4]byte{24, 0, 0, 1}[i] {
				return bad
			}
		}
	}
	if s.hsHave < 4 {
		for _, c := range s.hsHdr[s.hsHave:] {
			if c != 0 {
				return bad
			}
		}
		if s.hsLeft != 0 {
			return bad
		}
		return nil
	}
	l := uint32(s.hsHdr[1])<<16 | uint32(s.hsHdr[2])<<8 | uint32(s.hsHdr[3])
	if s.hsLeft == 0 || s.hsLeft > l || s.hsHdr[0] == handshakeKeyUpdate && (l != 1 || s.hsLeft != 1) {
		return bad
	}
	return nil
}

package handoff

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Version is the record layout this package writes and reads.
const Version = 1

// FlagTLS13 says the body ends with a TLS 1.3 section: the record state
// of a connection on edge's record layer and the start of a record it
// already read.
const FlagTLS13 = 1 << 0

// FlagToken says the body ends with the token section: the mark of the
// token the connection was opened with and the moment it must close. A
// process that does not know the flag refuses the record, and the
// connection is closed (1012) rather than carried on without its
// token's end.
const FlagToken = 1 << 1

// knownFlags are the flags this package reads; a record with any other
// is refused.
const knownFlags = FlagTLS13 | FlagToken

// HeaderSize is the size of a message header.
const HeaderSize = 10

// MaxBody bounds a record's body: a longer length is a broken stream.
const MaxBody = 64 << 10

var magic = [4]byte{'E', 'D', 'G', 'H'}

// ErrMalformed reports a record that cannot be read; the stream is still
// framed.
var ErrMalformed = errors.New("handoff: malformed state record")

// State is what a process needs to resume one connection.
type State struct {
	Listener    string // the listener's name, for the access log
	Pool        string // the pool the connection was placed in
	BackendID   string // the backend's ID in that pool
	BackendAddr string // and its address
	Method      string
	Host        string
	Path        string
	RequestID   string
	TLS         string     // TLS version name; "" on a plain listener
	Client      netip.Addr // the decided client (limits, stickiness)
	Peer        netip.Addr // the TCP peer or PROXY-protocol source
	Start       int64      // unix nanos when the request arrived
	Upgrade     int64      // nanos from the request to the 101
	In, Out     int64      // bytes so far, client to backend and back
	Last        int64      // unix nanos of the last byte either way
	Session     []byte     // wsession.Session.MarshalBinary
	// TLS13, when not nil, is the TLS 1.3 section (FlagTLS13).
	TLS13 *TLS13
	// Token, when not nil, is the token section (FlagToken).
	Token *Token
}

// Token is what a connection keeps of its token (auth.Mark) and when it
// closes (wsession's expiry, unix nanos; 0: never).
type Token struct {
	Subject, ID uint64
	IssuedAt    int64
	Expiry      int64
}

// TLS13 is the record-layer state of a TLS 1.3 connection.
type TLS13 struct {
	Record  []byte // keys, IVs, sequence numbers, both directions
	Pending []byte // bytes read from the socket, not yet decrypted
}

// Encode renders s as one message (header and body); it fails when a field
// is over its length prefix or the body over MaxBody.
func Encode(s *State) ([]byte, error) {
	b := make([]byte, HeaderSize, 256+len(s.Session))
	copy(b, magic[:])
	b[4] = Version
	var err error
	for _, v := range []string{s.Listener, s.Pool, s.BackendID, s.BackendAddr, s.Method, s.Host, s.Path, s.RequestID, s.TLS} {
		if len(v) > 0xffff {
			err = fmt.Errorf("handoff: field of %d bytes", len(v))
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
		b = append(b, v...)
	}
	for _, a := range []netip.Addr{s.Client, s.Peer} {
		raw := a.AsSlice() // nil for the zero Addr
		b = append(b, byte(len(raw)))
		b = append(b, raw...)
	}
	for _, v := range []int64{s.Start, s.Upgrade, s.In, s.Out, s.Last} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	b = appendBlob(b, s.Session)
	if t := s.TLS13; t != nil {
		b[5] |= FlagTLS13
		b = appendBlob(appendBlob(b, t.Record), t.Pending)
	}
	if t := s.Token; t != nil {
		b[5] |= FlagToken
		for _, v := range []uint64{t.Subject, t.ID, uint64(t.IssuedAt), uint64(t.Expiry)} {
			b = binary.BigEndian.AppendUint64(b, v)
		}
	}
	body := len(b) - HeaderSize
	if body > MaxBody {
		err = fmt.Errorf("handoff: body of %d bytes over %d", body, MaxBody)
	}
	binary.BigEndian.PutUint32(b[6:], uint32(body))
	return b, err
}

func appendBlob(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// Header is a parsed message header.
type Header struct {
	Version, Flags uint8
	Len            int // body length
}

// ParseHeader reads a message header; an error means the stream is no
// longer framed.
func ParseHeader(h []byte) (Header, error) {
	if len(h) < HeaderSize || [4]byte(h[:4]) != magic {
		return Header{}, errors.New("handoff: not a message header")
	}
	n := binary.BigEndian.Uint32(h[6:])
	if n > MaxBody {
		return Header{}, fmt.Errorf("handoff: body of %d bytes over %d", n, MaxBody)
	}
	return Header{Version: h[4], Flags: h[5], Len: int(n)}, nil
}

// Decode reads one whole message (header and body) into a State. Every
// error wraps ErrMalformed.
func Decode(msg []byte) (*State, error) {
	h, err := ParseHeader(msg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case h.Version != Version:
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMalformed, h.Version, Version)
	case h.Flags&^knownFlags != 0:
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrMalformed, h.Flags)
	case len(msg)-HeaderSize != h.Len:
		return nil, fmt.Errorf("%w: body of %d bytes, header says %d", ErrMalformed, len(msg)-HeaderSize, h.Len)
	}
	r := reader{b: msg[HeaderSize:]}
	s := &State{}
	for _, p := range []*string{&s.Listener, &s.Pool, &s.BackendID, &s.BackendAddr, &s.Method, &s.Host, &s.Path, &s.RequestID, &s.TLS} {
		*p = string(r.take(int(r.u16())))
	}
	for _, p := range []*netip.Addr{&s.Client, &s.Peer} {
		switch n := int(r.u8()); n {
		case 0:
		case 4, 16:
			*p, _ = netip.AddrFromSlice(r.take(n))
		default:
			r.fail(fmt.Errorf("address of %d bytes", n))
		}
	}
	for _, p := range []*int64{&s.Start, &s.Upgrade, &s.In, &s.Out, &s.Last} {
		*p = int64(r.u64())
	}
	s.Session = r.blob()
	if h.Flags&FlagTLS13 != 0 {
		s.TLS13 = &TLS13{Record: r.blob(), Pending: r.blob()}
	}
	if h.Flags&FlagToken != 0 {
		s.Token = &Token{Subject: r.u64(), ID: r.u64(), IssuedAt: int64(r.u64()), Expiry: int64(r.u64())}
	}
	if err := s.check(&r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return s, nil
}

// check judges a State Decode read with r: r read it whole and without
// error, and its counts and names make sense.
func (s *State) check(r *reader) error {
	switch {
	case r.err != nil:
		return r.err
	case len(r.b) != 0:
		return fmt.Errorf("%d bytes after the record", len(r.b))
	case s.In < 0 || s.Out < 0 || s.Upgrade < 0:
		return errors.New("negative count")
	case s.Pool == "" || s.BackendID == "":
		return errors.New("no pool or backend")
	}
	return nil
}

// reader reads big-endian fields; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.fail(errors.New("record truncated"))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// blob reads a u32 length and that many bytes, copied.
func (r *reader) blob() []byte {
	var n uint32
	if v := r.take(4); v != nil {
		n = binary.BigEndian.Uint32(v)
	}
	if r.err == nil && uint64(n) > uint64(len(r.b)) {
		r.fail(errors.New("record truncated"))
	}
	return append([]byte(nil), r.take(int(n))...)
}

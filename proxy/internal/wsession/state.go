package wsession

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/edgelb/edge/internal/wswire"
)

// stateVersion is the version of MarshalBinary's layout. A reader rejects
// any other version: a session restored from a layout it does not know
// would inject control frames inside frames. Version 2 added the
// permessage-deflate flag (stDeflate) and the tracker's trInflated: a
// version-1 record cannot say whether deflate was negotiated, so it is
// refused (the connection then gets a 1012 where it was) rather than
// resumed without counting. Version 3 added each tracker's strict-framing
// state (trFrag, trFragUnknown, trBad, its RSV policy and fault); a
// version-2 record is still read, its trackers judging RSV bits not at
// all and whether a message is unfinished from the next data frame on
// (fragUnknown), so an edge that did not follow that state upgrades to
// one that does without losing a connection.
const (
	stateVersion   = 3
	stateVersionV2 = 2
)

// Flag bits of a marshalled session.
const (
	stCloseSent = 1 << iota
	stCloseNoticed
	stCloseSeen
	stAware
	stCloseOut
	stClientEOF
	// Frame-aware part.
	stTooBig
	stEndAfterClose
	stPingWanted
	stPingExpired
	stTracksClient // the client->backend tracker was followed
	stDeflate      // permessage-deflate was negotiated (frame-aware only)
	stKnown        = stDeflate<<1 - 1
)

// Flag bits of a marshalled tracker.
const (
	trCloseSeen = 1 << iota
	trBroken
	trTooBig
	trSplit
	trTooBigMsg
	trClosing
	trCloseDone
	trNoted
	trMasked
	trInflated
	trFrag
	trFragUnknown
	trBad
	trKnown   = trBad<<1 - 1
	trKnownV2 = trInflated<<1 - 1
)

// trackerSize is the marshalled size of a tracker (version 3: with the
// RSV policy and the fault).
const trackerSize = wswire.MaxHeader + 4 + 2 + 2 + 1 + 8 + 8 + 1 + 2 + 2

// ErrIncompatible reports a session that cannot be resumed under the new
// Config: it asks for client frames to be followed (a frame or message
// limit) and the client stream was not, so its position is unknown.
var ErrIncompatible = errors.New("wsession: client frames not followed before, cannot be followed now")

// MarshalBinary returns what s holds (never a compressed client message
// under way, MidMessage: its inflater state does not move): the positions of both frame
// trackers, the close state, the heartbeat timestamps (unix nanos, wall
// clock: a new process resumes them against its own clock) and the
// lingering state. The Config is not part of it: a restored session takes
// the limits of its new Config. Call it while no driver runs the session.
func (s *Session) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 2+4+2+2+1+len(s.reason)+2*trackerSize+8*5+8)
	b = append(b, stateVersion)
	flags := uint16(0)
	set := func(bit uint16, v bool) {
		if v {
			flags |= bit
		}
	}
	set(stCloseSent, s.closeSent)
	set(stCloseNoticed, s.closeNoticed)
	set(stCloseOut, s.closeOut.Load())
	set(stClientEOF, s.clientEOF.Load())
	s.mu.Lock()
	reason, by, at, seen := s.reason, s.closeBy, s.closeAt, s.closeSeen
	s.mu.Unlock()
	set(stCloseSeen, seen)
	f := s.fw
	if f != nil {
		set(stAware, true)
		set(stTooBig, f.tooBig)
		set(stEndAfterClose, f.endAfterClose.Load())
		set(stPingWanted, f.pingWanted.Load())
		set(stPingExpired, f.pingExpired.Load())
		set(stTracksClient, s.cfg.tracksClient())
		set(stDeflate, f.z.negotiated)
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(s.closeCode.Load()))
	b = binary.BigEndian.AppendUint32(b, uint32(int32(at)))
	b = append(b, sideByte(by), byte(len(reason)))
	b = append(b, reason...)
	b = append(b, byte(s.linger.Load()))
	b = binary.BigEndian.AppendUint64(b, uint64(s.lingerUntil.Load()))
	b = binary.BigEndian.AppendUint64(b, uint64(s.lingered))
	b = s.b2c.appendState(b)
	if f != nil {
		b = f.c2b.appendState(b)
		b = binary.BigEndian.AppendUint64(b, uint64(f.lastClient.Load()))
		b = binary.BigEndian.AppendUint64(b, uint64(f.pingSent.Load()))
		b = binary.BigEndian.AppendUint64(b, uint64(f.awaitSince.Load()))
	}
	return b, nil
}

// UnmarshalBinary restores what MarshalBinary returned into s, which Init
// readied with the Config of the new process's pool (its limits). A
// frame-aware Config over a session that was opaque starts the heartbeat
// afresh; a Config that follows client frames over a session that did not
// is ErrIncompatible. Anything malformed is an error and s is unusable.
func (s *Session) UnmarshalBinary(b []byte) error {
	if s.cfg == nil {
		return errors.New("wsession: UnmarshalBinary before Init")
	}
	var st state
	if err := st.read(b); err != nil {
		return err
	}
	if err := st.check(s.cfg); err != nil {
		return err
	}
	flags := st.flags
	s.closeSent, s.closeNoticed = flags&stCloseSent != 0, flags&stCloseNoticed != 0
	s.closeCode.Store(st.code)
	s.reason, s.closeBy, s.closeAt, s.closeSeen = st.reason, st.by, int(st.at), flags&stCloseSeen != 0
	s.closeOut.Store(flags&stCloseOut != 0)
	s.clientEOF.Store(flags&stClientEOF != 0)
	s.linger.Store(st.linger)
	s.lingerUntil.Store(st.lingerUntil)
	s.lingered = st.lingered
	st.b2c.limit = s.b2c.limit
	s.b2c = st.b2c
	if f := s.fw; f != nil && flags&stAware != 0 {
		st.c2b.limit, st.c2b.msgLimit = f.c2b.limit, f.c2b.msgLimit
		f.c2b = st.c2b
		f.tooBig = flags&stTooBig != 0
		f.endAfterClose.Store(flags&stEndAfterClose != 0)
		f.pingWanted.Store(flags&stPingWanted != 0)
		f.pingExpired.Store(flags&stPingExpired != 0)
		f.lastClient.Store(st.last)
		f.pingSent.Store(st.sent)
		f.awaitSince.Store(st.await)
		if flags&stDeflate != 0 {
			s.DeflateOn()
		}
	}
	if f := s.fw; f != nil {
		// The record says nothing of pongs (pong.go): the adopted side
		// assumes a backend ping may be waiting, so the client's next
		// pong goes on, and that edge has no ping out. A session whose
		// client frames were not followed (stTracksClient; an opaque one
		// neither) has no known boundary to find a pong at: its pongs
		// all go on.
		f.backendPings.Store(1)
		f.pongedAt = 0
		f.pongBlind = flags&stTracksClient == 0
	}
	return nil
}

// state is a marshalled session, read but not yet applied.
type state struct {
	flags                 uint16
	code, at, linger      int32
	by                    Side
	sideOK                bool
	reason                Reason
	lingerUntil, lingered int64
	b2c, c2b              tracker
	last, sent, await     int64
}

// read parses b.
func (st *state) read(b []byte) error {
	r := reader{b: b}
	v := r.u8()
	if v != stateVersion && v != stateVersionV2 {
		return fmt.Errorf("wsession: state version %d, want %d", v, stateVersion)
	}
	st.flags = r.u16()
	st.code = int32(r.u32())
	st.at = int32(r.u32())
	st.by, st.sideOK = byteSide(r.u8())
	st.reason = Reason(r.bytes(int(r.u8())))
	st.linger = int32(r.u8())
	st.lingerUntil = int64(r.u64())
	st.lingered = int64(r.u64())
	st.b2c.readState(&r, v)
	if st.flags&stAware != 0 {
		st.c2b.readState(&r, v)
		st.last, st.sent, st.await = int64(r.u64()), int64(r.u64()), int64(r.u64())
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("wsession: %d bytes after the state", len(r.b))
	}
	return nil
}

// check validates a parsed state against the Config it resumes under.
func (st *state) check(cfg *Config) error {
	flags := st.flags
	switch {
	case flags&^stKnown != 0:
		return fmt.Errorf("wsession: unknown state flags %#x", flags)
	case !st.sideOK:
		return errors.New("wsession: unknown close side")
	case st.reason != ReasonKeep && !validName(st.reason):
		return fmt.Errorf("wsession: unknown close reason %q", st.reason)
	case st.linger < lingerNone || st.linger > lingerOver:
		return fmt.Errorf("wsession: linger state %d", st.linger)
	case st.code < 0 || st.code > 4999 || st.at < 0 || st.at > 65535:
		return errors.New("wsession: close code out of range")
	case flags&stAware == 0 && flags&(stTooBig|stEndAfterClose|stPingWanted|stPingExpired|stTracksClient|stDeflate) != 0:
		return errors.New("wsession: frame-aware flags on an opaque session")
	case cfg.tracksClient() && flags&stTracksClient == 0:
		return ErrIncompatible
	}
	return nil
}

// appendState appends the tracker's position (its limits are Config).
func (t *tracker) appendState(b []byte) []byte {
	b = append(b, t.hdr[:]...)
	b = append(b, t.closeMask[:]...)
	b = append(b, t.closeBuf[:]...)
	flags := uint16(0)
	for i, v := range []bool{t.closeSeen, t.broken, t.tooBig, t.split, t.tooBigMsg, t.closing, t.closeDone, t.noted, t.masked, t.inflated,
		t.frag, t.fragUnknown, t.bad} {
		if v {
			flags |= 1 << i
		}
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = append(b, t.hn)
	b = binary.BigEndian.AppendUint64(b, t.remaining)
	b = binary.BigEndian.AppendUint64(b, t.msgLen)
	b = append(b, t.closeN)
	b = binary.BigEndian.AppendUint16(b, t.code)
	return append(b, t.rsv, byte(t.fault))
}

// readState reads what appendState wrote (for version, 2 or 3); errors
// go to r.
func (t *tracker) readState(r *reader, version uint8) {
	copy(t.hdr[:], r.bytes(wswire.MaxHeader))
	copy(t.closeMask[:], r.bytes(4))
	copy(t.closeBuf[:], r.bytes(2))
	flags := r.u16()
	t.closeSeen, t.broken, t.tooBig = flags&trCloseSeen != 0, flags&trBroken != 0, flags&trTooBig != 0
	t.split, t.tooBigMsg, t.closing = flags&trSplit != 0, flags&trTooBigMsg != 0, flags&trClosing != 0
	t.closeDone, t.noted, t.masked = flags&trCloseDone != 0, flags&trNoted != 0, flags&trMasked != 0
	t.inflated = flags&trInflated != 0
	t.frag, t.fragUnknown, t.bad = flags&trFrag != 0, flags&trFragUnknown != 0, flags&trBad != 0
	t.hn = r.u8()
	t.remaining = r.u64()
	t.msgLen = r.u64()
	t.closeN = r.u8()
	t.code = r.u16()
	known := uint16(trKnown)
	if version == stateVersionV2 {
		known = trKnownV2
		t.rsv, t.fragUnknown = rsvAny, true
	} else {
		t.rsv, t.fault = r.u8(), fault(r.u8())
	}
	if r.err != nil {
		return
	}
	switch {
	case t.rsv != rsvNone && t.rsv != rsvDeflate && t.rsv != rsvAny:
		r.err = fmt.Errorf("wsession: tracker RSV policy %#x", t.rsv)
	case int(t.fault) >= len(faultNames) || t.bad != (t.fault != faultNone):
		r.err = fmt.Errorf("wsession: tracker fault %d", t.fault)
	case flags&^known != 0:
		r.err = fmt.Errorf("wsession: unknown tracker flags %#x", flags)
	case t.hn >= wswire.MaxHeader:
		// A header of MaxHeader bytes is always parsed: never carried.
		r.err = fmt.Errorf("wsession: tracker header of %d bytes", t.hn)
	case t.closeN > 1:
		// Two bytes complete the code: never carried.
		r.err = fmt.Errorf("wsession: close code byte %d", t.closeN)
	case t.hn > 0 && t.remaining > 0:
		r.err = errors.New("wsession: tracker inside a header and a payload at once")
	case t.hn > 0 && !partialHeader(t.hdr[:t.hn]):
		r.err = errors.New("wsession: carried header bytes are no partial header")
	}
}

// partialHeader reports whether h is the start of a frame header that is
// not complete yet: what a tracker carries between two chunks.
func partialHeader(h []byte) bool {
	p, err := wswire.ParseHeader(h)
	return err == nil && p.Size == 0
}

func sideByte(s Side) byte {
	switch s {
	case SideClient:
		return 1
	case SideBackend:
		return 2
	case SideEdge:
		return 3
	}
	return 0
}

func byteSide(b byte) (Side, bool) {
	switch b {
	case 0:
		return "", true
	case 1:
		return SideClient, true
	case 2:
		return SideBackend, true
	case 3:
		return SideEdge, true
	}
	return "", false
}

// reader reads big-endian fields; the first short read is kept in err and
// every later read returns zero.
type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = errors.New("wsession: state truncated")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.bytes(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.bytes(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.bytes(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.bytes(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

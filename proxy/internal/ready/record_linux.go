package ready

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/tls/record"
)

// Buffers lends the runs' buffers: at least record.MaxRecord bytes each.
type Buffers interface {
	GetBuf() *[]byte
	PutBuf(*[]byte)
}

// NewRecordConn returns the record layer of a TLS 1.3 client over sock,
// resumed at st (record.Resume, or a hand-off's state) with tail, the
// start of a record already read; peer knows the client's address.
func NewRecordConn(sock *Sock, st *record.State, tail []byte, peer Peer, bufs Buffers) *RecordConn {
	r := &RecordConn{bufs: bufs, sock: sock, peer: peer, st: st}
	r.setTail(tail)
	return r
}

// Peer tells a RecordConn its client's address. The accepted connection
// knows it (a PROXY header's source included), so the record layer asks
// it instead of keeping a copy of its own.
type Peer interface{ RemoteAddr() net.Addr }

// RecordConn is the client side of a TLS 1.3 WebSocket once the splice owns
// its record layer (tls/record): reads unprotect records in place in the
// caller's buffer, writes protect them into a borrowed buffer, and
// between runs the connection holds only the record state (keys,
// sequence numbers) and, rarely, the start of a record still in flight.
//
// The runner reads and writes; a closing goroutine may write a
// close_notify at the same time, hence mu over the record state.
type RecordConn struct {
	mu   sync.Mutex
	bufs Buffers
	sock *Sock
	peer Peer
	st   *record.State
	tail []byte // an incomplete record read ahead; nil when none
	rerr error  // sticky read error (close_notify read: io.EOF)
	shut bool   // close_notify sent

	// hot while the record state may hold ciphers; rest asks the end of
	// the run to drop them (Conn.Rest, Conn.RestNow).
	hot, rest atomic.Bool
}

// setTail keeps b, an incomplete record, for the next read: a copy of
// its own, since b is in the run's borrowed buffer. The copy goes into
// the tail's array while that holds it and is at most twice as long, so
// a record that trickles in a byte at a time costs a few allocations,
// not one of everything so far per byte, and a short tail keeps no long
// array.
func (r *RecordConn) setTail(b []byte) {
	switch {
	case len(b) == 0:
		r.tail = nil
	case cap(r.tail) >= len(b) && cap(r.tail) <= 2*len(b):
		r.tail = append(r.tail[:0], b...)
	default:
		r.tail = append(make([]byte, 0, min(2*len(b), record.MaxRecord)), b...)
	}
}

// Read fills p with application data. p must hold a whole record
// (record.MaxRecord): the splice's buffers do.
func (r *RecordConn) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.rerr != nil {
			return 0, r.rerr
		}
		k := copy(p, r.tail)
		n, err := r.sock.Read(p[k:])
		if n == 0 {
			if errors.Is(err, io.EOF) && k > 0 {
				// The peer ended in the middle of a record.
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		plain, used, oerr := r.st.Open(p[:k+n])
		r.setTail(p[used : k+n])
		r.answerLocked()
		if oerr != nil {
			return len(plain), r.readFailed(oerr)
		}
		if len(plain) > 0 || used > 0 {
			// Records without application data (a KeyUpdate, whose
			// answer may have queued): back to the pump, which stops
			// reading a client whose queue is over clientQueueCap.
			return len(plain), nil
		}
		// Only part of a record so far: read on.
	}
}

// readFailed makes err sticky; a record the client got wrong is answered
// with its alert (RFC 8446 §6.2) before the connection closes.
func (r *RecordConn) readFailed(err error) error {
	r.rerr = err
	var ae *record.AlertError
	if errors.As(err, &ae) && !r.shut {
		r.shut = true
		bp := r.bufs.GetBuf()
		r.sock.Write(r.st.SealAlert((*bp)[:0], ae.Alert))
		r.bufs.PutBuf(bp)
	}
	return err
}

// answerLocked sends the KeyUpdate a client asked for (RFC 8446 §4.6.3).
func (r *RecordConn) answerLocked() {
	if !r.st.Pending() || r.shut {
		return
	}
	bp := r.bufs.GetBuf()
	r.sock.Write(r.st.Seal((*bp)[:0], nil))
	r.bufs.PutBuf(bp)
}

// sealChunk is the plaintext of one write of protected records: one
// record of the largest size, so a borrowed buffer holds it sealed.
const sealChunk = 16 << 10

// Write protects p and sends it; like the sock's, it never reports a
// would-block (what the socket does not take is queued).
func (r *RecordConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shut {
		return 0, net.ErrClosed
	}
	bp := r.bufs.GetBuf()
	defer r.bufs.PutBuf(bp)
	n := 0
	for len(p) > 0 || r.st.Pending() {
		k := min(len(p), sealChunk)
		if _, err := r.sock.Write(r.st.Seal((*bp)[:0], p[:k])); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// closeNotifyLocked sends close_notify once.
func (r *RecordConn) closeNotifyLocked() {
	if r.shut {
		return
	}
	r.shut = true
	bp := r.bufs.GetBuf()
	r.sock.Write(r.st.SealAlert((*bp)[:0], 0))
	r.bufs.PutBuf(bp)
}

// Close sends close_notify (RFC 8446 §6.1) and closes the socket.
func (r *RecordConn) Close() error {
	r.mu.Lock()
	r.closeNotifyLocked()
	r.mu.Unlock()
	return r.sock.Close()
}

// CloseWrite sends close_notify, then a FIN once the queue is out (RFC
// 8446 §6.1: the write half is done); the read half stays open for the
// client's answer.
func (r *RecordConn) CloseWrite() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeNotifyLocked()
	return r.sock.CloseWrite()
}

// idle drops the record state's ciphers while the connection rests.
func (r *RecordConn) idle() {
	r.mu.Lock()
	r.st.Idle()
	r.mu.Unlock()
}

func (r *RecordConn) LocalAddr() net.Addr { return r.sock.LocalAddr() }

// RemoteAddr is the client's address, as the Peer given to NewRecordConn
// tells it; nil without one.
func (r *RecordConn) RemoteAddr() net.Addr {
	if r.peer == nil {
		return nil
	}
	return r.peer.RemoteAddr()
}

func (r *RecordConn) SetDeadline(time.Time) error      { return nil }
func (r *RecordConn) SetReadDeadline(time.Time) error  { return nil }
func (r *RecordConn) SetWriteDeadline(time.Time) error { return nil }

// afterRun is the end of a run: the ciphers are dropped when the sweeper
// or the run asked for it (Rest, RestNow), and are hot otherwise.
func (r *RecordConn) afterRun() {
	if r.rest.Swap(false) {
		r.idle()
	} else {
		r.hot.Store(true)
	}
}

// restNow has afterRun drop the ciphers, unless a record is read in part.
func (r *RecordConn) restNow() {
	r.mu.Lock()
	partial := r.tail != nil
	r.mu.Unlock()
	if !partial {
		r.hot.Store(false)
		r.rest.Store(true)
	}
}

func (r *RecordConn) resting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.hot.Load() && !r.rest.Load() && !r.st.Ciphers()
}

// Healthy reports a record layer that can still move: no read error, no
// close_notify sent. The caller holds it still (Frozen).
func (r *RecordConn) healthy() bool { return r.rerr == nil && !r.shut }

// State marshals the record state and returns it with the start of a
// record already read (the hand-off's TLS 1.3 section). Frozen only.
func (r *RecordConn) state() (st, tail []byte, err error) {
	st, err = r.st.MarshalBinary()
	return st, r.tail, err
}

// Tail is the length of an incomplete record held: for tests.
func (r *RecordConn) Tail() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tail)
}

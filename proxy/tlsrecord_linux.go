package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/edgelb/edge/tls/record"
)

// recordLayerOn: the readiness-driven splice exists here, so it may own
// the TLS 1.3 record layer.
const recordLayerOn = true

// recConn is the client side of a TLS 1.3 WebSocket once the splice owns
// its record layer (tls/record): reads unprotect records in place in the
// caller's buffer, writes protect them into a borrowed buffer, and
// between runs the connection holds only the record state (keys,
// sequence numbers) and, rarely, the start of a record still in flight.
//
// The runner reads and writes; a closing goroutine may write a
// close_notify at the same time, hence mu over the record state.
type recConn struct {
	mu   sync.Mutex
	srv  *Server
	sock *sock
	ec   *edgeConn // addresses; its socket is sock
	st   *record.State
	tail []byte // an incomplete record read ahead; nil when none
	rerr error  // sticky read error (close_notify read: io.EOF)
	shut bool   // close_notify sent
}

// ownRecords moves a TLS 1.3 client from crypto/tls to edge's record
// layer right after the takeover. It first reads what crypto/tls already
// holds (records it read behind the upgrade request, not the socket) and returns it
// appended to clientBuffered, then rebuilds the record state crypto/tls
// reached from the connection's handshake log (record.Resume). ok false:
// the connection stays on crypto/tls (TLS 1.2, a suite the record layer
// lacks, a log over its bound, anything unexpected); the returned bytes
// are then still what the client sent.
func (r *readyState) ownRecords(ec *edgeConn, clientBuffered []byte) ([]byte, bool) {
	c := r.c
	tc, isTLS := c.client.(*tls.Conn)
	if !isTLS {
		return clientBuffered, false
	}
	p, owned := r.takeRecords(tc, ec, clientBuffered)
	if owned {
		c.s.recOwned.Add(1)
	} else {
		c.s.recKept.Add(1)
	}
	return p, owned
}

func (r *readyState) takeRecords(tc *tls.Conn, ec *edgeConn, clientBuffered []byte) ([]byte, bool) {
	c := r.c
	if ec.log == nil {
		return clientBuffered, false
	}
	cs := tc.ConnectionState()
	if cs.Version != tls.VersionTLS13 {
		ec.log.stop()
		return clientBuffered, false
	}
	// Only what crypto/tls already holds: reading the socket through it
	// would take whatever a fast client keeps sending, into one buffer
	// and the handshake log, with no backpressure.
	ec.buffered = true
	drained, err := drainTLS(c.s, tc, clientBuffered)
	ec.buffered = false
	if err != nil {
		// A close_notify or an error read behind the request: crypto/tls
		// reports it again on the splice's first read.
		ec.log.stop()
		return drained, false
	}
	hlog := ec.log
	ec.log = nil
	rlog, wlog, csec, ssec, ok := hlog.take()
	if !ok {
		// The log may have stopped before the handshake logged its
		// secrets (a ClientHello past the bound): they are there now.
		hlog.end()
		return drained, false
	}
	st, tail, err := record.Resume(cs.CipherSuite, csec, ssec, rlog, wlog)
	// The state keeps copies of its own; these are the key log's.
	clear(csec)
	clear(ssec)
	if err != nil {
		c.s.log.Debug("record layer: keeping crypto/tls", "err", err)
		return drained, false
	}
	rc := &recConn{srv: c.s, sock: ec.s, ec: ec, st: st}
	rc.setTail(tail)
	c.client = rc
	r.rec = rc
	return drained, true
}

// drainTLS reads from tc until crypto/tls would have to read the socket
// (edgeConn.buffered), appending the plaintext to p.
func drainTLS(s *Server, tc *tls.Conn, p []byte) ([]byte, error) {
	bp := s.getBuf()
	defer s.putBuf(bp)
	for {
		n, err := tc.Read(*bp)
		p = append(p, (*bp)[:n]...)
		switch {
		case err == nil:
		case errors.Is(err, errWouldBlock):
			return p, nil
		default:
			return p, err
		}
	}
}

// setTail keeps b, an incomplete record, for the next read: a copy of
// its own, since b is in the run's borrowed buffer. The copy goes into
// the tail's array while that holds it and is at most twice as long, so
// a record that trickles in a byte at a time costs a few allocations,
// not one of everything so far per byte, and a short tail keeps no long
// array.
func (r *recConn) setTail(b []byte) {
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
func (r *recConn) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.rerr != nil {
			return 0, r.rerr
		}
		k := copy(p, r.tail)
		n, err := r.sock.read(p[k:])
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
func (r *recConn) readFailed(err error) error {
	r.rerr = err
	var ae *record.AlertError
	if errors.As(err, &ae) && !r.shut {
		r.shut = true
		bp := r.srv.getBuf()
		r.sock.write(r.st.SealAlert((*bp)[:0], ae.Alert))
		r.srv.putBuf(bp)
	}
	return err
}

// answerLocked sends the KeyUpdate a client asked for (RFC 8446 §4.6.3).
func (r *recConn) answerLocked() {
	if !r.st.Pending() || r.shut {
		return
	}
	bp := r.srv.getBuf()
	r.sock.write(r.st.Seal((*bp)[:0], nil))
	r.srv.putBuf(bp)
}

// sealChunk is the plaintext of one write of protected records: one
// record of the largest size, so a borrowed buffer holds it sealed.
const sealChunk = 16 << 10

// Write protects p and sends it; like the sock's, it never reports a
// would-block (what the socket does not take is queued).
func (r *recConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shut {
		return 0, net.ErrClosed
	}
	bp := r.srv.getBuf()
	defer r.srv.putBuf(bp)
	n := 0
	for len(p) > 0 || r.st.Pending() {
		k := min(len(p), sealChunk)
		if _, err := r.sock.write(r.st.Seal((*bp)[:0], p[:k])); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// closeNotifyLocked sends close_notify once.
func (r *recConn) closeNotifyLocked() {
	if r.shut {
		return
	}
	r.shut = true
	bp := r.srv.getBuf()
	r.sock.write(r.st.SealAlert((*bp)[:0], 0))
	r.srv.putBuf(bp)
}

// Close sends close_notify (RFC 8446 §6.1) and closes the socket.
func (r *recConn) Close() error {
	r.mu.Lock()
	r.closeNotifyLocked()
	r.mu.Unlock()
	return r.sock.close()
}

// CloseWrite sends close_notify, then a FIN once the queue is out (RFC
// 8446 §6.1: the write half is done); the read half stays open for the
// client's answer.
func (r *recConn) CloseWrite() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeNotifyLocked()
	return r.sock.closeWrite()
}

// idle drops the record state's ciphers while the connection rests.
func (r *recConn) idle() {
	r.mu.Lock()
	r.st.Idle()
	r.mu.Unlock()
}

func (r *recConn) LocalAddr() net.Addr              { return r.ec.LocalAddr() }
func (r *recConn) RemoteAddr() net.Addr             { return r.ec.RemoteAddr() }
func (r *recConn) SetDeadline(time.Time) error      { return nil }
func (r *recConn) SetReadDeadline(time.Time) error  { return nil }
func (r *recConn) SetWriteDeadline(time.Time) error { return nil }

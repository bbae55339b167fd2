package proxy

import (
	"crypto/tls"
	"errors"

	"github.com/edgelb/edge/proxy/internal/ready"
	"github.com/edgelb/edge/tls/record"
)

// recordLayerOn: the readiness-driven splice exists here, so it may own
// the TLS 1.3 record layer.
const recordLayerOn = true

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
	rc := ready.NewRecordConn(ec.s, st, tail, ec, &c.s.bufs)
	c.client = rc
	r.rc.SetRecord(rc)
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
		case errors.Is(err, ready.ErrWouldBlock):
			return p, nil
		default:
			return p, err
		}
	}
}

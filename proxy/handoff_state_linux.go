package proxy

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/proxy/internal/handoff"
	"github.com/edgelb/edge/proxy/internal/wsession"
	"github.com/edgelb/edge/tls/record"
)

// A moved connection's state, both ways: what Handoff writes of an
// exchange and its wsConn (handoffState, encode) and what Adopt rebuilds
// from it (resumed, recordStateOf), side by side so that a field added
// to one is seen missing from the other.

// handoffState is c's state record, without the TLS section.
func (c *wsConn) handoffState() *handoff.State {
	x := c.x
	sess, _ := c.sess.MarshalBinary()
	st := &handoff.State{
		Pool: c.pool.name, BackendID: c.be.ID(), BackendAddr: c.be.Addr(),
		Method: x.method, Host: x.host, Path: x.path, RequestID: x.requestID(), TLS: x.tls,
		Client: x.id.client, Peer: x.id.peer,
		Start: x.start.UnixNano(), Upgrade: int64(x.upgrade),
		In: c.in.Load(), Out: c.out.Load(), Last: c.sess.LastActivity(),
		Session: sess,
	}
	if x.lo != nil {
		st.Listener = x.lo.Name
	}
	if w := c.who; w != nil {
		st.Token = &handoff.Token{Subject: w.Subject, ID: w.ID, IssuedAt: w.IssuedAt, Expiry: c.sess.Expiry()}
	}
	return st
}

// resumed is the inverse of handoffState: the exchange and the wsConn of
// st, in pool on backend be, with the listener options lo (only its
// name: the access line's). Its sockets, driver and counts are Adopt's.
// restart: see resumeSession.
func (s *Server) resumed(st *handoff.State, lo *ListenerOptions, pool *pool, be *balance.Backend) (c *wsConn, restart bool, err error) {
	x := &exchange{s: s, lo: lo, start: time.Unix(0, st.Start), pool: pool,
		id: identity{peer: st.Peer, client: st.Client}, backend: st.BackendID, status: 101, ws: true,
		method: st.Method, host: st.Host, path: st.Path, tls: st.TLS, reqID: st.RequestID, upgrade: time.Duration(st.Upgrade)}
	x.detach()
	c = &wsConn{s: s, x: x, be: be, pool: pool}
	restart, err = c.resumeSession(st.Session)
	if err != nil {
		return nil, false, err
	}
	if neg, counted := c.sess.Deflate(); counted {
		x.deflate = deflateCounted
	} else if neg {
		x.deflate = deflatePassed
	}
	if t := st.Token; t != nil {
		// The token's end and its mark move with the connection: an
		// upgrade neither lengthens its life nor hides it from a
		// revocation.
		c.who = &auth.Mark{Subject: t.Subject, ID: t.ID, IssuedAt: t.IssuedAt}
		c.sess.SetExpiry(t.Expiry)
	}
	c.sess.Touch(st.Last)
	c.in.Store(st.In)
	c.out.Store(st.Out)
	return c, restart, nil
}

// resumeSession restores the session a record carries under this
// process's settings of c's pool. restart: the pool follows client frames
// now and this stream's position is unknown, so it is resumed without
// client limits, to be closed 1012.
func (c *wsConn) resumeSession(b []byte) (restart bool, err error) {
	cfg := &c.pool.ws
	c.sess.Init(cfg, time.Now().UnixNano())
	err = c.sess.UnmarshalBinary(b)
	if errors.Is(err, wsession.ErrIncompatible) {
		own := *cfg
		own.MaxFrameBytes, own.MaxMessageBytes, own.Rate = 0, 0, wsession.Rate{}
		c.sess = wsession.Session{}
		c.sess.Init(&own, time.Now().UnixNano())
		err, restart = c.sess.UnmarshalBinary(b), true
	}
	if err != nil {
		return false, err
	}
	if r := c.sess.Reason(); r != reasonKeep && !slices.Contains(CloseReasons(), r) {
		return false, fmt.Errorf("session: unknown close reason %q", r)
	}
	return restart, nil
}

// encode is the connection's state record; a TLS 1.3 client's record
// state (keys, IVs, sequence numbers, a KeyUpdate answer owed) and the
// start of a record it already read go with it.
func (f *frozen) encode() ([]byte, error) {
	st := f.r.c.handoffState()
	rec, tail, err := f.rf.RecordState()
	if err != nil {
		return nil, err
	}
	if rec != nil {
		st.TLS13 = &handoff.TLS13{Record: rec, Pending: tail}
	}
	return handoff.Encode(st)
}

// recordStateOf is the TLS 1.3 record state a record carries (nil for a
// plain connection); a TLS connection without one cannot be resumed.
func recordStateOf(st *handoff.State) (*record.State, error) {
	if st.TLS13 == nil {
		if st.TLS != "" {
			return nil, errors.New("a TLS connection without its record state")
		}
		return nil, nil
	}
	rs := new(record.State)
	if err := rs.UnmarshalBinary(st.TLS13.Record); err != nil {
		return nil, fmt.Errorf("TLS 1.3 record state: %w", err)
	}
	return rs, nil
}

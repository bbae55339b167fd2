package proxy

import "github.com/edgelb/edge/proxy/internal/ready"

// readyOf is the readiness driver of c; nil on the goroutine splice.
func readyOf(c *wsConn) *readyState {
	r, _ := c.d.(*readyState)
	return r
}

// maxClientQueue reports the longest queue towards a client among the
// live readiness-driven connections.
func (s *Server) maxClientQueue() int64 {
	var m int64
	s.reg.each(func(c *wsConn) {
		if r := readyOf(c); r != nil {
			m = max(m, r.cs.QueuedBytes())
		}
	})
	return m
}

// recordConns counts the live connections whose TLS records the splice
// owns (tlsrecord_linux.go).
func (s *Server) recordConns() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if r := readyOf(c); r != nil && r.rc.Record() != nil {
			n++
		}
	})
	return n
}

// restedConns counts the record-layer connections whose ciphers are
// dropped (the sweeper's rest, or a run that moved nothing: RestNow).
func (s *Server) restedConns() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if r := readyOf(c); r != nil && r.rc.Resting() {
			n++
		}
	})
	return n
}

// oneConn returns a live connection of the registry.
func (s *Server) oneConn() *wsConn {
	var one *wsConn
	s.reg.each(func(c *wsConn) { one = c })
	return one
}

// recordTails is the number of bytes of incomplete records the live
// record-layer connections hold.
func (s *Server) recordTails() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if r := readyOf(c); r != nil && r.rc.Record() != nil {
			n += r.rc.Record().Tail()
		}
	})
	return n
}

var _ ready.Handler = (*readyState)(nil)

package proxy

import "golang.org/x/sys/unix"

// maxClientQueue reports the longest queue towards a client among the
// live readiness-driven connections.
func (s *Server) maxClientQueue() int64 {
	var m int64
	s.reg.each(func(c *wsConn) {
		if r, ok := c.d.(*readyState); ok && r.cs != nil {
			m = max(m, r.cs.queuedBytes())
		}
	})
	return m
}

// recordConns counts the live connections whose TLS records the splice
// owns (tlsrecord_linux.go).
func (s *Server) recordConns() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if r, ok := c.d.(*readyState); ok && r.rec != nil {
			n++
		}
	})
	return n
}

// restedConns counts the record-layer connections whose ciphers the
// runner dropped after the sweeper found them quiet.
func (s *Server) restedConns() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if r, ok := c.d.(*readyState); ok && r.rec != nil && !r.hot.Load() && !r.rest.Load() {
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

// unread is how many bytes wait in the socket's receive queue.
func (s *sock) unread() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := unix.IoctlGetInt(s.fd, unix.SIOCINQ)
	if err != nil {
		return -1
	}
	return n
}

// recordTails is the number of bytes of incomplete records the live
// record-layer connections hold.
func (s *Server) recordTails() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if r, ok := c.d.(*readyState); ok && r.rec != nil {
			rc := r.rec
			rc.mu.Lock()
			n += len(rc.tail)
			rc.mu.Unlock()
		}
	})
	return n
}

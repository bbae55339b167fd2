package proxy

// closeRequested reports how many live connections have a close request.
func (s *Server) closeRequested() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if c.sess.Requested() {
			n++
		}
	})
	return n
}

// readyConns reports how many live connections the readiness-driven splice runs.
func (s *Server) readyConns() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if _, ok := c.d.(*goDriver); !ok {
			n++
		}
	})
	return n
}

// closesSent counts live connections whose client has been sent a close
// frame.
func (s *Server) closesSent() int {
	n := 0
	s.reg.each(func(c *wsConn) {
		if c.sess.CloseOut() {
			n++
		}
	})
	return n
}

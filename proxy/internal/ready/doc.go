// Package ready is the readiness runtime of edge's splice on Linux: it
// keeps a live WebSocket without any goroutine or buffer of its own while
// it is idle, and runs it when one of its sockets becomes readable or
// writable.
//
// It owns:
//
//	sock_linux.go    Sock: a taken-over TCP socket, read and written
//	                 without ever blocking; what it does not take is
//	                 queued (writes never fail at the TLS layer)
//	rawio*_linux.go  read(2), write(2) and epoll_wait(2) without the
//	                 runtime's system-call bookkeeping
//	poll_linux.go    the pollers: one epoll instance and goroutine each,
//	                 parked in Go's netpoller on the epoll descriptor
//	conn_linux.go    Conn: a connection's two sockets, the readiness they
//	                 reported and the runner state (one run at a time)
//	runtime_linux.go Runtime: the pollers and the sweeper, from Run to
//	                 the end of its context
//	trim_linux.go    when the sweeper calls Quiet: a burst of new
//	                 connections is over
//	sched.go         the sweeper's schedule: a heap of connections by
//	                 the time each next needs a visit (pure)
//	record_linux.go  RecordConn: the client's TLS 1.3 records once edge
//	                 owns them (tls/record), between runs only keys and
//	                 sequence numbers
//	freeze_linux.go  Frozen: a connection held still to move to another
//	                 process (FDs, RecordState, Unwatch, Thaw, Forget)
//
// What a run does is the driver's (proxy's readiness splice implements
// Handler): the runtime knows nothing of HTTP, WebSockets or the proxy's
// policy, and the proxy reaches none of the runtime's private state. On
// other systems Runtime never runs and every connection takes the
// goroutine splice.
//
// The sweeper visits a connection only when its Handler's last Sweep said
// it would be due, or when it ran, was added or closed since the last
// tick (a mark on its poller's list): a tick costs the work that is due,
// not one visit per connection held, and each deadline is still met at
// the first tick at or after it.
//
// Why each piece is as it is (crypto/tls's write errors, lost wake-ups,
// bytes buffered before the takeover, close order) is in
// docs/ARCHITECTURE.md, "Two splice drivers".
package ready

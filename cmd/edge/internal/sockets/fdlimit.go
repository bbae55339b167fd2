package sockets

// FDReserve is how many descriptors the client budget leaves for
// everything else: the admin listener and its clients, Consul, health
// checks, the listening sockets, epoll instances and log files.
const FDReserve = 128

// ConnBudget shares nofile descriptors out the way HAProxy derives maxconn
// from ulimit-n when maxconn is not set: every proxied connection holds two
// (client and backend), and FDReserve stay for the rest. With B = nofile -
// FDReserve:
//
//	limits.max_connections, when absent from the file: B / 2
//	open client sockets (AcceptLimit):                 B - min(max_connections, B/2)
//
// The socket cap counts sockets that hold no backend yet (idle keep-alive,
// TLS handshakes, requests being refused 503), so it is at least B/2 and
// grows when max_connections leaves descriptors unused; a max_connections
// of 0 (unlimited) gets B/2. nofile 0 (unknown) caps nothing.
func ConnBudget(nofile, maxConns int64, derived bool) (conns, sockets int64) {
	if nofile <= 0 {
		return maxConns, 0
	}
	b := max(nofile-FDReserve, 2)
	if derived {
		maxConns = b / 2
	}
	held := b / 2
	if maxConns > 0 {
		held = min(maxConns, b/2)
	}
	return maxConns, b - held
}

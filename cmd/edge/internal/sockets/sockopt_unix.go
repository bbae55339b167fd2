//go:build unix && !linux && !solaris

package sockets

import "golang.org/x/sys/unix"

// acceptedKeepAlive: elsewhere Go sets its default keep-alive on every
// accepted socket, since inheriting it from the listener is not assured.
const acceptedKeepAlive = 0

func listenerOptions() []sockopt {
	return []sockopt{{"SO_REUSEPORT", unix.SOL_SOCKET, unix.SO_REUSEPORT, 1}}
}

// setsockoptInt sets one integer option of the listening socket.
func setsockoptInt(fd uintptr, level, opt, v int) error {
	return unix.SetsockoptInt(int(fd), level, opt, v)
}

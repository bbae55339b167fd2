//go:build !unix || solaris

package sockets

import (
	"errors"
	"fmt"
)

// acceptedKeepAlive: Go sets its default keep-alive on every accepted
// socket.
const acceptedKeepAlive = 0

// listenerOptions is empty where there is no SO_REUSEPORT (Windows, and
// Solaris and illumos, for which golang.org/x/sys/unix names none):
// Windows' SO_REUSEADDR would let any process bind over edge's port, so a
// listener here is an ordinary one and one port takes one edge.
func listenerOptions() []sockopt { return nil }

// setsockoptInt is never reached: listenerOptions names no option here.
func setsockoptInt(_ uintptr, level, opt, _ int) error {
	return fmt.Errorf("setsockopt level %d option %d: %w", level, opt, errors.ErrUnsupported)
}

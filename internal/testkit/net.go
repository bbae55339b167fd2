package testkit

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// RawBackend runs handle for every connection accepted on a loopback
// port, closing the connection when handle returns, and returns the
// address. At the end of the test it stops accepting and waits for every
// handle to return.
func RawBackend(t testing.TB, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// ClosedPort returns a loopback address nobody listens on right now: a
// port to refuse connections, or one for a process to listen on.
func ClosedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// IsClosed reports whether err means the peer closed the connection or
// reset it.
func IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "close")
}

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
// port to refuse connections, or one for a process to listen on. It never
// returns the same port twice in one test binary: the kernel may pick a
// port it just released again, and a test that asked for two (an admin
// and a public listener, say) would then get one socket twice.
func ClosedPort(t testing.TB) string {
	t.Helper()
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if handedOut.add(addr) {
			return addr
		}
	}
	t.Fatal("no loopback port that was not handed out before")
	return ""
}

// handedOut is the set of ports ClosedPort returned in this process. It
// is process-wide on purpose: the collisions it prevents are between
// tests and helpers that know nothing of each other.
var handedOut = portSet{seen: map[string]bool{}}

type portSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

// add records addr and reports whether it was new.
func (s *portSet) add(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[addr] {
		return false
	}
	s.seen[addr] = true
	return true
}

// IsClosed reports whether err means the peer closed the connection or
// reset it.
func IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "close")
}

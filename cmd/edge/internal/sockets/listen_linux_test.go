package sockets

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// Keep-alive is set on the listening socket only; accepted sockets must
// carry it all the same (the kernel copies it), or half-open clients on a
// silent path would never be probed.
func TestAcceptedSocketsInheritKeepAlive(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rc, err := a.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveIdle},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveInterval},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
		{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
	} {
		var v int
		var gerr error
		if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("getsockopt %s: %v", o.name, gerr)
		}
		if v != o.want {
			t.Errorf("accepted socket %s = %d, want %d", o.name, v, o.want)
		}
	}
}

// TestListenerDefersAccept: the listening socket waits for the client's
// first bytes before it hands a connection over (TCP_DEFER_ACCEPT), so
// what Accept returns already holds them: the handshake's first read
// needs no wait in the poller.
func TestListenerDefersAccept(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil || v <= 0 {
		t.Fatalf("listening socket TCP_DEFER_ACCEPT = %d (%v), want it set", v, gerr)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	arc, err := a.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var rerr error
	if err := arc.Control(func(fd uintptr) {
		n, _, rerr = unix.Recvfrom(int(fd), make([]byte, 1), unix.MSG_DONTWAIT|unix.MSG_PEEK)
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 || rerr != nil {
		t.Fatalf("accepted connection: peek %d bytes (%v), want the client's byte already there", n, rerr)
	}
}

package ready

import (
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSockSize keeps a Sock within the 80-byte size class: a held
// connection keeps two, and a box holds up to 100,000 connections.
func TestSockSize(t *testing.T) {
	if n := reflect.TypeOf(Sock{}).Size(); n > 80 {
		t.Errorf("Sock is %d bytes, want at most 80", n)
	}
}

// TestConnSize keeps a Conn and its two Socks, one allocation, within the
// 256-byte size class.
func TestConnSize(t *testing.T) {
	if n := reflect.TypeOf(connSocks{}).Size(); n > 256 {
		t.Errorf("connSocks is %d bytes, want at most 256", n)
	}
}

// TestNewConnSockets checks that the sockets NewConn makes are over the
// descriptors it was given, each on its side.
func TestNewConnSockets(t *testing.T) {
	own, peer := socketPairs(t)
	defer unix.Close(peer[0])
	defer unix.Close(peer[1])
	c := NewConn(nil, own[0], own[1])
	for i, side := range []Side{Client, Backend} {
		s := c.Sock(side)
		defer s.Close()
		msg := []byte{'c' + byte(i)}
		if _, err := unix.Write(peer[i], msg); err != nil {
			t.Fatal(err)
		}
		var b [4]byte
		if n, err := s.Read(b[:]); err != nil || string(b[:n]) != string(msg) {
			t.Errorf("side %d read %q, %v; want %q", side, b[:n], err, msg)
		}
	}
}

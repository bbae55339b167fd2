package ready

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPollerRoundTrips echoes 3,000 one-byte messages through a
// connection, one at a time, so that the poller meets each way it waits
// many times: the look after a batch, the yield and second look, and the
// park in Go's netpoller. A lost wake-up leaves a message unanswered.
func TestPollerRoundTrips(t *testing.T) {
	rt, _ := sweepRuntime(t)
	h := &sweepHandler{next: func(*sweepHandler, int64) int64 { return 0 }}
	h.onStep = func(h *sweepHandler) {
		// Echo what the client sent, on the client socket.
		var b [64]byte
		s := h.c.Sock(Client)
		for {
			n, err := s.Read(b[:])
			if n > 0 {
				s.Write(b[:n])
			}
			if err != nil || n == 0 {
				return
			}
		}
	}
	peer := sweepConn(t, rt, h)
	if err := unix.SetNonblock(peer, false); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(30 * time.Second))
	if err := unix.SetsockoptTimeval(peer, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		msg := []byte{byte(i)}
		if _, err := unix.Write(peer, msg); err != nil {
			t.Fatalf("message %d: write: %v", i, err)
		}
		var got [1]byte
		n, err := unix.Read(peer, got[:])
		for err == unix.EINTR { // the runtime's signals, not the poller
			n, err = unix.Read(peer, got[:])
		}
		if n != 1 || got[0] != msg[0] {
			t.Fatalf("message %d: echo %v (%d bytes, %v), want %v: the poller missed its event", i, got, n, err, msg)
		}
	}
}

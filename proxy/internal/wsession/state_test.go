package wsession

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestStateResumesMidFrame: a session marshalled in the middle of a
// backend frame (inside its header, then inside its payload) and restored
// into a new session under the same Config puts a requested close after
// the end of that frame, exactly where the uninterrupted session does.
func TestStateResumesMidFrame(t *testing.T) {
	cfg := &Config{PingInterval: time.Second}
	data := append([]byte{0x82, 126, 0, 200}, make([]byte, 200)...)
	data = append(data, 0x81, 1, 'x')
	for _, cut := range []int{1, 3, 50} {
		var a Session
		a.Init(cfg, 1)
		n, _ := a.FromBackend(data[:cut])
		if n != cut {
			t.Fatalf("cut %d: consumed %d", cut, n)
		}
		st, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var b Session
		b.Init(cfg, 2)
		if err := b.UnmarshalBinary(st); err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		b.Request(CloseGoingAway, Reason("drain"))
		if c := b.BackendControl(); c.Frame != nil {
			t.Fatalf("cut %d: close injected inside the frame", cut)
		}
		n, _ = b.FromBackend(data[cut:])
		if got, want := cut+n, 4+200; got != want {
			t.Fatalf("cut %d: stopped at %d, want the frame's end %d", cut, got, want)
		}
		if c := b.BackendControl(); c.Code != CloseGoingAway {
			t.Fatalf("cut %d: no close at the boundary: %+v", cut, c)
		}
	}
}

// TestStateIncompatible: a session that did not follow client frames
// cannot be resumed under a Config with a frame limit.
func TestStateIncompatible(t *testing.T) {
	var a Session
	a.Init(&Config{PingInterval: time.Second}, 1)
	st, _ := a.MarshalBinary()
	var b Session
	b.Init(&Config{MaxFrameBytes: 10}, 1)
	if err := b.UnmarshalBinary(st); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("UnmarshalBinary = %v, want ErrIncompatible", err)
	}
	var c Session
	c.Init(&Config{}, 1)
	if err := c.UnmarshalBinary(st); err != nil {
		t.Fatalf("frame-aware into opaque: %v", err)
	}
}

// FuzzSessionState: UnmarshalBinary never panics, and a state it accepts
// marshals back to the same bytes.
func FuzzSessionState(f *testing.F) {
	aware := &Config{MaxFrameBytes: 1 << 20, PingInterval: time.Second, PingTimeout: time.Second}
	var s Session
	s.Init(aware, 5)
	s.FromBackend([]byte{0x81, 5, 'h'}) // inside a payload
	s.FromClient([]byte{0x81, 0x85, 1, 2}, 7)
	st, _ := s.MarshalBinary()
	f.Add(st, true) // frame-aware, mid-frame both ways
	var o Session
	o.Init(&Config{}, 5)
	o.FromBackend([]byte{0x88, 2, 3}) // inside a close code
	st2, _ := o.MarshalBinary()
	f.Add(st2, false) // opaque, reading a close code
	f.Add([]byte{stateVersion}, false)
	var b Session
	b.Init(aware, 5)
	b.fw.pingWanted.Store(true)
	b.ControlWritten(b.BackendControl(), 6)
	st3, _ := b.MarshalBinary()
	f.Add(st3, true) // frame-aware, edge's ping out, both ways between frames
	f.Fuzz(func(t *testing.T, b []byte, frameAware bool) {
		cfg := &Config{}
		if frameAware {
			cfg = aware
		}
		var s Session
		s.Init(cfg, 1)
		if s.UnmarshalBinary(b) != nil {
			return
		}
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if b[0] == stateVersion && (frameAware || b[2]&stAware == 0) {
			if !bytes.Equal(again, b) {
				t.Fatalf("re-marshalled state differs:\n in %x\nout %x", b, again)
			}
		}
		s.FromBackend([]byte{0x81, 1, 'x', 0x82, 0})
		if !frameAware {
			return
		}
		// The record says nothing of pongs: the client's first pong after
		// it goes on, even with edge's ping out (pong.go).
		s.fw.pingWanted.Store(true)
		if c := s.BackendControl(); c.Frame != nil && c.Code == 0 {
			s.ControlWritten(c, 2)
		}
		if v := s.FromClient([]byte{0x8a, 0x80, 1, 2, 3, 4}, 3); v.Drop != 0 {
			t.Fatalf("the first pong after the hand-off was consumed: %+v", v)
		}
	})
}

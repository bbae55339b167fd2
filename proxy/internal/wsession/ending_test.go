package wsession

import (
	"errors"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/wswire"
)

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

const sec = int64(time.Second)

func newSession(cfg *Config) *Session {
	s := new(Session)
	s.Init(cfg, 1)
	return s
}

// TestEOFDecisions: the client's FIN is passed on to the backend; the
// backend's is passed on to the client, unless edge already sent the
// client a close frame (then the server closes TCP first, RFC 6455
// §7.1.1, once the frame is out).
func TestEOFDecisions(t *testing.T) {
	s := newSession(&Config{LingerTimeout: time.Second})
	if a := s.EOF(SideClient); a.Kind != HalfClose || a.Side != SideBackend {
		t.Fatalf("client EOF: %+v, want a half-close of the backend", a)
	}
	if s.Reason() != ReasonClientClosed {
		t.Fatalf("reason %q", s.Reason())
	}

	s = newSession(&Config{LingerTimeout: time.Second})
	if a := s.EOF(SideBackend); a.Kind != HalfClose || a.Side != SideClient {
		t.Fatalf("backend EOF: %+v, want a half-close of the client", a)
	}

	s = newSession(&Config{LingerTimeout: time.Second})
	s.Request(CloseGoingAway, "drain")
	ctl := s.BackendControl()
	if ctl.Code != CloseGoingAway {
		t.Fatalf("control %+v", ctl)
	}
	s.ControlWritten(ctl, 2)
	if a := s.EOF(SideBackend); a.Kind != End || !a.Flush || a.Reason != "drain" {
		t.Fatalf("backend EOF after a close frame: %+v, want the end after the flush, reason drain", a)
	}
	// Then the end lingers: the client has its close frame.
	if a := s.Finish(ReasonKeep, false, 3); a.Kind != Linger {
		t.Fatalf("finish after the close frame: %+v, want Linger", a)
	}
	if a := s.EOF(SideBackend); a.Kind != Nothing {
		t.Fatalf("backend EOF while lingering: %+v, want Nothing", a)
	}
}

// TestWriteFailedDecisions: a timed-out write ends at once; a failed
// write to the client ends; a failed write to the backend after the
// client got its close frame lingers.
func TestWriteFailedDecisions(t *testing.T) {
	cfg := &Config{LingerTimeout: time.Second, LingerBytes: 10}
	for _, tc := range []struct {
		name      string
		closeOut  bool
		side      Side
		err       error
		kind      Kind
		reason    Reason
		lingering bool
	}{
		{"client", false, SideClient, errors.New("reset"), End, ReasonClientClosed, false},
		{"client after close", true, SideClient, errors.New("reset"), End, ReasonClientClosed, false},
		{"backend", false, SideBackend, errors.New("reset"), End, ReasonBackendClosed, false},
		{"backend after close", true, SideBackend, errors.New("reset"), Linger, ReasonBackendClosed, true},
		{"timeout after close", true, SideBackend, timeoutErr{}, End, ReasonWriteTimeout, false},
	} {
		s := newSession(cfg)
		if tc.closeOut {
			s.closeOut.Store(true)
		}
		a := s.WriteFailed(tc.side, tc.err, 2)
		if a.Kind != tc.kind || s.Reason() != tc.reason || s.lingering() != tc.lingering {
			t.Errorf("%s: %+v reason %q lingering %v; want kind %d reason %q lingering %v",
				tc.name, a, s.Reason(), s.lingering(), tc.kind, tc.reason, tc.lingering)
		}
	}
}

// TestTickDecisions: the clock's decisions in order: idle timeout, write
// stall, ping due, ping timeout (a close 1011 first, then the end), and
// the end of a lingering close.
func TestTickDecisions(t *testing.T) {
	s := newSession(&Config{IdleTimeout: 10 * time.Second})
	if a := s.Tick(1+9*sec, 0); a.Kind != Nothing {
		t.Fatalf("before idle: %+v", a)
	}
	if a := s.Tick(1+10*sec, 0); a.Kind != End || a.Reason != ReasonIdleTimeout {
		t.Fatalf("idle: %+v", a)
	}

	s = newSession(&Config{WriteTimeout: time.Second})
	if a := s.Tick(5*sec, 4*sec+1); a.Kind != Nothing {
		t.Fatalf("young queue: %+v", a)
	}
	if a := s.Tick(5*sec, 4*sec); a.Kind != End || a.Reason != ReasonWriteTimeout {
		t.Fatalf("stalled queue: %+v", a)
	}

	s = newSession(&Config{PingInterval: time.Second, PingTimeout: time.Second})
	if a := s.Tick(1+sec, 0); a.Kind != Ping {
		t.Fatalf("ping due: %+v", a)
	}
	ctl := s.BackendControl()
	if string(ctl.Frame) != string(wswire.Ping) {
		t.Fatalf("control %+v, want a ping", ctl)
	}
	s.ControlWritten(ctl, 1+sec)
	if a := s.Tick(1+2*sec, 0); a.Kind != Close || a.Code != ClosePingTimeout {
		t.Fatalf("ping timeout: %+v, want a close 1011", a)
	}
	// Not between two frames: the end at once.
	s.FromBackend([]byte{0x81, 5, 'a'})
	if ctl := s.BackendControl(); !ctl.End || ctl.Frame != nil || ctl.Reason != ReasonPingTimeout {
		t.Fatalf("control mid-frame: %+v, want the end", ctl)
	}

	s = newSession(&Config{PingInterval: time.Second, PingTimeout: time.Second, LingerTimeout: time.Second})
	s.Tick(1+sec, 0)
	s.ControlWritten(s.BackendControl(), 1+sec)
	s.Tick(1+2*sec, 0)
	ctl = s.BackendControl()
	if ctl.Code != ClosePingTimeout || !ctl.End || !ctl.Flush {
		t.Fatalf("control at a boundary: %+v, want a close 1011 and the end after it", ctl)
	}
	s.ControlWritten(ctl, 1+2*sec)
	if c := s.BackendControl(); c.Frame != nil || c.End {
		t.Fatalf("control after the 1011: %+v, want none", c)
	}
	if a := s.Finish(ReasonKeep, false, 1+2*sec); a.Kind != Linger {
		t.Fatalf("finish after the 1011: %+v, want Linger", a)
	}
	if a := s.Tick(1+3*sec-1, 0); a.Kind != Nothing {
		t.Fatalf("lingering: %+v", a)
	}
	if a := s.Tick(1+3*sec, 0); a.Kind != End || a.Reason != ReasonPingTimeout {
		t.Fatalf("linger bound: %+v", a)
	}
	if s.lingering() {
		t.Fatal("still lingering after the bound")
	}
}

// TestDeadlineWakesForRequest: a close request the backend reader has not
// noticed puts its deadline in the past, and BackendControl clears it.
func TestDeadlineWakesForRequest(t *testing.T) {
	s := newSession(&Config{IdleTimeout: time.Minute})
	if d := s.Deadline(SideBackend); d != 1+int64(time.Minute) {
		t.Fatalf("deadline %d", d)
	}
	s.Request(CloseGoingAway, "drain")
	if d := s.Deadline(SideBackend); d != 1 {
		t.Fatalf("deadline with a request %d, want 1", d)
	}
	if d := s.Deadline(SideClient); d != 1+int64(time.Minute) {
		t.Fatalf("the client reader's deadline moved: %d", d)
	}
	s.BackendControl()
	if d := s.Deadline(SideBackend); d != 1+int64(time.Minute) {
		t.Fatalf("deadline after the control %d", d)
	}
}

// TestFinishForced: a forced end ends lingering too.
func TestFinishForced(t *testing.T) {
	s := newSession(&Config{LingerTimeout: time.Second})
	s.closeOut.Store(true)
	if a := s.Finish("drain", false, 1); a.Kind != Linger {
		t.Fatalf("%+v", a)
	}
	if a := s.Finish("shutdown", true, 2); a.Kind != End || a.Reason != "drain" {
		t.Fatalf("forced: %+v, want End with the first reason", a)
	}
	if s.lingering() {
		t.Fatal("still lingering")
	}
}

// TestNextTick: NextTick is the earliest of the deadlines Tick checks
// (idle, a stalled queue, the next ping, the ping timeout, the end of
// lingering), none when nothing is armed, and Tick has nothing to say
// before it.
func TestNextTick(t *testing.T) {
	s := newSession(&Config{})
	if n := s.NextTick(0); n != 0 {
		t.Fatalf("nothing armed: NextTick %d, want 0", n)
	}
	s = newSession(&Config{IdleTimeout: time.Hour, WriteTimeout: time.Second, PingInterval: 30 * time.Second, PingTimeout: 90 * time.Second})
	if n, want := s.NextTick(0), 1+30*sec; n != want {
		t.Fatalf("idle session: NextTick %d, want the ping at %d", n, want)
	}
	if n, want := s.NextTick(5*sec), 6*sec; n != want {
		t.Fatalf("queue since 5 s: NextTick %d, want its write timeout at %d", n, want)
	}
	if a := s.Tick(1+30*sec-1, 0); a.Kind != Nothing {
		t.Fatalf("before NextTick: %+v", a)
	}
	if a := s.Tick(1+30*sec, 0); a.Kind != Ping {
		t.Fatalf("at NextTick: %+v, want a ping", a)
	}
	// The ping is wanted, not written: only the idle timeout is armed.
	if n, want := s.NextTick(0), 1+int64(time.Hour); n != want {
		t.Fatalf("ping wanted: NextTick %d, want the idle timeout %d", n, want)
	}
	s.ControlWritten(s.BackendControl(), 31*sec)
	if n, want := s.NextTick(0), 61*sec; n != want {
		t.Fatalf("ping written at 31 s: NextTick %d, want the next ping at %d", n, want)
	}
	// The client answers: the heartbeat starts again from its byte.
	s.FromClient([]byte{0x8a, 0x80, 1, 2, 3, 4}, 40*sec)
	s.Touch(40 * sec)
	if n, want := s.NextTick(0), 70*sec; n != want {
		t.Fatalf("client byte at 40 s: NextTick %d, want %d", n, want)
	}

	s = newSession(&Config{IdleTimeout: time.Hour, PingInterval: 30 * time.Second, PingTimeout: 10 * time.Second})
	s.Tick(1+30*sec, 0)
	s.ControlWritten(s.BackendControl(), 31*sec)
	if n, want := s.NextTick(0), 41*sec; n != want {
		t.Fatalf("unanswered ping: NextTick %d, want its timeout at %d", n, want)
	}

	s = newSession(&Config{IdleTimeout: time.Hour, LingerTimeout: 2 * time.Second})
	s.closeOut.Store(true)
	if a := s.Finish(ReasonKeep, false, 5*sec); a.Kind != Linger {
		t.Fatalf("finish: %+v, want Linger", a)
	}
	if n, want := s.NextTick(3*sec), 7*sec; n != want {
		t.Fatalf("lingering: NextTick %d, want its end at %d (a queue does not count)", n, want)
	}
}

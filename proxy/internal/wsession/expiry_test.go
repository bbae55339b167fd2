package wsession

import (
	"testing"
	"time"
)

// TestExpiry: a connection whose token ends closes with the pool's code
// at the next frame boundary, no earlier; NextTick and the backend
// reader's Deadline name the moment, so both drivers wake for it; one
// whose close frame cannot get out (a backend frame that never ends) is
// ended FinTimeout later.
func TestExpiry(t *testing.T) {
	cfg := &Config{ExpiryCode: 4001, ExpiryReason: "token_expired", LingerTimeout: time.Second}
	s := newSession(cfg)
	at := 100 * sec
	s.SetExpiry(at)
	if got := s.NextTick(0); got != at {
		t.Fatalf("NextTick %d, want the expiry %d", got, at)
	}
	if got := s.Deadline(SideBackend); got != at {
		t.Fatalf("backend Deadline %d, want the expiry %d", got, at)
	}
	if a := s.Tick(at-1, 0); a.Kind != Nothing {
		t.Fatalf("before the expiry: %+v", a)
	}
	if a := s.Tick(at, 0); a.Kind != Close || a.Code != 4001 {
		t.Fatalf("at the expiry: %+v, want a close 4001", a)
	}
	ctl := s.BackendControl()
	if ctl.Code != 4001 {
		t.Fatalf("control %+v, want the close 4001", ctl)
	}
	if s.Reason() != "token_expired" {
		t.Fatalf("reason %q", s.Reason())
	}
	if a := s.Tick(at+1, 0); a.Kind != Nothing {
		t.Fatalf("after the request: %+v, want Nothing (one request)", a)
	}
	if got := s.NextTick(0); got != at+int64(FinTimeout) {
		t.Fatalf("NextTick after the request %d, want the bound %d", got, at+int64(FinTimeout))
	}
	if a := s.Tick(at+int64(FinTimeout), 0); a.Kind != End || a.Reason != "token_expired" {
		t.Fatalf("close frame still not out after FinTimeout: %+v, want the end", a)
	}

	// Once the close frame is out the closing handshake has until the
	// same bound: a client that never answers the close does not keep a
	// revoked or expired token's connection open.
	s = newSession(cfg)
	s.SetExpiry(at)
	s.Tick(at, 0)
	s.ControlWritten(s.BackendControl(), at)
	if !s.CloseOut() {
		t.Fatal("the close frame is not out")
	}
	if got := s.NextTick(0); got != at+int64(FinTimeout) {
		t.Fatalf("NextTick after the close frame %d, want the bound %d", got, at+int64(FinTimeout))
	}
	if a := s.Tick(at+int64(FinTimeout), 0); a.Kind != End {
		t.Fatalf("close unanswered after FinTimeout: %+v, want the end", a)
	}

	// No expiry: nothing scheduled.
	if got := newSession(cfg).NextTick(0); got != 0 {
		t.Fatalf("NextTick without expiry %d", got)
	}
}

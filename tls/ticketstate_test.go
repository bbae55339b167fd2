package tls_test

import (
	"testing"

	edgetls "github.com/edgelb/edge/tls"
)

// TestCarriedTicketKeysResume: a session from one Terminator resumes on
// a new one started from its TicketState (what an upgrade carries), TLS
// 1.2 and 1.3; a state that cannot be read starts fresh keys, and keys
// from a key file are not carried at all.
func TestCarriedTicketKeysResume(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	old := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})
	state := old.term.TicketState()
	if len(state) == 0 {
		t.Fatal("generated keys: no state to carry")
	}
	next := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{Carried: state}})
	fresh := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{Carried: state[:len(state)-1]}})
	for _, v := range versions {
		t.Run(v.name, func(t *testing.T) {
			c := resumeClient(p, v.v)
			mustDial(t, old.addr, c)
			if !mustDial(t, next.addr, c).DidResume {
				t.Fatal("a session of the previous process did not resume on the one started from its keys")
			}
			c = resumeClient(p, v.v)
			mustDial(t, old.addr, c)
			if mustDial(t, fresh.addr, c).DidResume {
				t.Fatal("a truncated state was taken")
			}
		})
	}
}

// FuzzTicketState: a carried state is taken whole or not at all, and no
// input panics the Terminator that reads it.
func FuzzTicketState(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(append([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 80)...))
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := edgetls.CheckTicketState(b); err == nil && len(b) > edgetls.MaxTicketStateBytes {
			t.Fatalf("a state of %d bytes was taken", len(b))
		}
	})
}

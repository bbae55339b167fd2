package tls_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	edgetls "github.com/edgelb/edge/tls"
)

var versions = []struct {
	name string
	v    uint16
}{{"TLS1.2", tls.VersionTLS12}, {"TLS1.3", tls.VersionTLS13}}

func resumeClient(p *pki, v uint16) *tls.Config {
	c := p.client("a.example.com")
	c.MinVersion, c.MaxVersion = v, v
	c.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	return c
}

func TestResumption(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})
	for _, v := range versions {
		t.Run(v.name, func(t *testing.T) {
			c := resumeClient(p, v.v)
			if cs := mustDial(t, e.addr, c); cs.DidResume {
				t.Fatal("first handshake resumed")
			}
			cs := mustDial(t, e.addr, c)
			if !cs.DidResume {
				t.Fatal("second handshake: got full, want resumed")
			}
			if got, want := cs.Version, v.v; got != want {
				t.Errorf("version: got %#x, want %#x", got, want)
			}
		})
	}

	t.Run("disabled", func(t *testing.T) {
		d := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{Disabled: true}})
		for _, v := range versions {
			c := resumeClient(p, v.v)
			mustDial(t, d.addr, c)
			if cs := mustDial(t, d.addr, c); cs.DidResume {
				t.Errorf("%s: resumed with tickets disabled", v.name)
			}
		}
		if s := d.term.Status().Tickets; s.Enabled {
			t.Errorf("status: got %+v, want disabled", s)
		}
	})
}

// TestResumptionAcrossRotations: a ticket survives Keep-1 rotations and is
// refused after Keep.
func TestResumptionAcrossRotations(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	const keep = 3
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{Keep: keep, RotateEvery: time.Hour}})
	for _, v := range versions {
		for rotations := 0; rotations <= keep; rotations++ {
			t.Run(fmt.Sprintf("%s/%d rotations", v.name, rotations), func(t *testing.T) {
				c := resumeClient(p, v.v)
				mustDial(t, e.addr, c)
				for range rotations {
					if err := e.term.RotateTicketKeys(); err != nil {
						t.Fatal(err)
					}
				}
				got := mustDial(t, e.addr, c).DidResume
				if want := rotations < keep; got != want {
					t.Errorf("resumed: got %v, want %v", got, want)
				}
			})
		}
	}
	if got := e.obs.all(); len(got) != 2*(0+1+2+3) {
		t.Errorf("rotation events: got %d, want %d", len(got), 12)
	}
	if s := e.term.Status().Tickets; s.Keys != keep || s.Generation != 13 || s.KeyGenerations[0] != 13 {
		t.Errorf("ticket status: got %+v, want %d keys, generation 13", s, keep)
	}
}

func TestRetiredTicketKeysCleared(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{Keep: 2}})
	first := e.term.TicketAESKeys()[0]
	if *first == [32]byte{} {
		t.Fatal("fresh key is all zero")
	}
	e.term.RotateTicketKeys()
	if *first == [32]byte{} {
		t.Fatal("key cleared while still accepted")
	}
	e.term.RotateTicketKeys()
	if *first != [32]byte{} {
		t.Error("retired key not cleared")
	}
}

func TestTicketMaxAge(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	clk := newClock()
	// Keys from a file never rotate here, so only the age bound can end
	// resumption: RotateEvery*Keep = 20m.
	keyFile := filepath.Join(t.TempDir(), "tickets.keys")
	testkit.WriteFile(t, keyFile, []byte(newKeyLine(80)))
	e := start(t, edgetls.Options{
		Certificates: []edgetls.CertFiles{l.files()},
		Tickets:      edgetls.TicketOptions{KeyFile: keyFile, RotateEvery: 10 * time.Minute, Keep: 2},
		Now:          clk.Now,
	})
	for _, v := range versions {
		t.Run(v.name, func(t *testing.T) {
			c := resumeClient(p, v.v)
			mustDial(t, e.addr, c)
			clk.Advance(19 * time.Minute)
			if !mustDial(t, e.addr, c).DidResume {
				t.Fatal("ticket aged 19m of 20m: not resumed")
			}
			// The resumed connection brought a new ticket issued now.
			clk.Advance(21 * time.Minute)
			if mustDial(t, e.addr, c).DidResume {
				t.Error("ticket aged 21m of 20m: resumed")
			}
		})
	}
}

func newKeyLine(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b) + "\n"
}

// TestTicketKeyFile: two nodes sharing a key file resume each other's
// sessions; a new file is picked up; a broken one keeps the old keys.
func TestTicketKeyFile(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	keyFile := filepath.Join(t.TempDir(), "tickets.keys")
	k1, k2, k3 := newKeyLine(80), newKeyLine(48), newKeyLine(80)
	testkit.WriteFile(t, keyFile, []byte("# fleet keys, first encrypts\n"+k1+"\n"+k2))
	opts := edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{KeyFile: keyFile}, ReloadInterval: -1}
	a, b := start(t, opts), start(t, opts)
	ctx := context.Background()

	for _, v := range versions {
		c := resumeClient(p, v.v)
		mustDial(t, a.addr, c)
		if !mustDial(t, b.addr, c).DidResume {
			t.Errorf("%s: ticket from node a not resumed on node b", v.name)
		}
	}

	// The operator rotates: a new first key, the old one still accepted.
	clients := map[uint16]*tls.Config{}
	for _, v := range versions {
		clients[v.v] = resumeClient(p, v.v)
		mustDial(t, a.addr, clients[v.v]) // ticket under k1
	}
	testkit.WriteFile(t, keyFile, []byte(k3+k1))
	for _, e := range []*env{a, b} {
		if err := e.term.PollTicketKeys(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.obs.all(); len(got) != 1 || got[0] != "tickets" {
		t.Errorf("events on b: got %q, want one rotation", got)
	}
	wantResumed(t, b.addr, clients, true, "ticket under the now second key not resumed")

	// A broken file keeps the keys in use.
	testkit.WriteFile(t, keyFile, []byte("not base64 at all!\n"))
	err := b.term.PollTicketKeys(ctx)
	if err == nil || !strings.Contains(err.Error(), keyFile) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("broken key file: got %v, want an error naming the file and line", err)
	}
	b.term.PollTicketKeys(ctx)
	if got, want := b.logs.count("session ticket keys not reloaded"), 1; got != want {
		t.Errorf("error logged %d times, want %d", got, want)
	}
	if s := b.term.Status().Tickets; s.LastError == "" || s.Keys != 2 {
		t.Errorf("status after broken file: got %+v, want the error and 2 keys", s)
	}
	wantResumed(t, b.addr, clients, true, "not resumed after a broken key file")

	// Keys replaced entirely: old tickets are refused.
	testkit.WriteFile(t, keyFile, []byte(newKeyLine(80)))
	if err := b.term.PollTicketKeys(ctx); err != nil {
		t.Fatal(err)
	}
	wantResumed(t, b.addr, clients, false, "resumed with a key no longer in the file")
	if s := b.term.Status().Tickets; s.LastError != "" || s.Keys != 1 || !strings.HasPrefix(s.Source, "file:") {
		t.Errorf("status: got %+v", s)
	}

	// Startup with a broken file fails.
	os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString([]byte("short"))), 0o600)
	if _, err := edgetls.New(opts); err == nil || !strings.Contains(err.Error(), "want 48 or 80") {
		t.Errorf("New with a short key: got %v, want a length error", err)
	}
}

// wantResumed dials addr once with the client of every version and reports,
// with what, each whose resumption is not want.
func wantResumed(t *testing.T, addr string, clients map[uint16]*tls.Config, want bool, what string) {
	t.Helper()
	for _, v := range versions {
		if mustDial(t, addr, clients[v.v]).DidResume != want {
			t.Errorf("%s: %s", v.name, what)
		}
	}
}

func TestOpenSSLResumption(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})

	t.Run("TLS1.2 -reconnect", func(t *testing.T) {
		out := sClient(t, e.addr, "-servername", "a.example.com", "-tls1_2", "-reconnect")
		if got := strings.Count(out, "Reused, TLSv1.2"); got < 5 {
			t.Errorf("reconnections reused: got %d, want 5:\n%s", got, out)
		}
	})
	t.Run("TLS1.3 -sess_out/-sess_in", func(t *testing.T) {
		sess := filepath.Join(t.TempDir(), "sess.pem")
		out := sClientSessOut(t, e.addr, sess, "-servername", "a.example.com", "-tls1_3")
		if !strings.Contains(out, "New, TLSv1.3") {
			t.Fatalf("first connection not a new TLS 1.3 session:\n%s", out)
		}
		out = sClient(t, e.addr, "-servername", "a.example.com", "-tls1_3", "-sess_in", sess)
		if !strings.Contains(out, "Reused, TLSv1.3") {
			t.Errorf("second connection not resumed:\n%s", out)
		}
		// After Keep rotations the stored session is refused.
		for range 3 {
			e.term.RotateTicketKeys()
		}
		out = sClient(t, e.addr, "-servername", "a.example.com", "-tls1_3", "-sess_in", sess)
		if !strings.Contains(out, "New, TLSv1.3") {
			t.Errorf("after 3 rotations: want a new session:\n%s", out)
		}
	})
}

func FuzzParseTicketKeys(f *testing.F) {
	f.Add([]byte(newKeyLine(80)))                            // one AES-256 key
	f.Add([]byte("# comment\n\n" + newKeyLine(48)))          // comment, blank line, AES-128 key
	f.Add([]byte(newKeyLine(80) + newKeyLine(48)))           // mixed sizes
	f.Add([]byte("  " + strings.TrimSpace(newKeyLine(80))))  // surrounding blanks
	f.Add([]byte(base64.StdEncoding.EncodeToString(nil)))    // empty key
	f.Add([]byte("!!!!\n"))                                  // not base64
	f.Add([]byte(strings.Repeat(newKeyLine(48), 65)))        // too many keys
	f.Add([]byte(strings.TrimSuffix(newKeyLine(80), "=\n"))) // missing padding
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := edgetls.ParseTicketKeys(data)
		if err != nil {
			if keys != nil {
				t.Fatalf("keys %d returned with error %v", len(keys), err)
			}
			return
		}
		if len(keys) == 0 || len(keys) > 64 {
			t.Fatalf("got %d keys without error", len(keys))
		}
		for i, k := range keys {
			if len(k) != 48 && len(k) != 80 {
				t.Fatalf("key %d: %d bytes", i, len(k))
			}
		}
	})
}

// TestRunRotatesAndStops: Run's rotation loop works on its own timer, a
// second Run is refused, and Run returns when its context ends.
func TestRunRotatesAndStops(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{RotateEvery: 5 * time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.term.Run(ctx) }()
	e.obs.wait(t, "tickets")
	if err := e.term.Run(ctx); err == nil {
		t.Error("second Run: got nil, want an error")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: got %v, want nil at context end", err)
	}
}

// flakySource is a TicketKeySource whose answer the test sets: a key
// source that is down (Consul KV while the agent restarts) is a fault the
// real source cannot be made to show on cue inside this package's tests.
type flakySource struct {
	mu   sync.Mutex
	keys []string // base64 lines; nil means down
}

func (f *flakySource) set(lines ...string) { f.mu.Lock(); f.keys = lines; f.mu.Unlock() }

func (f *flakySource) TicketKeys(context.Context) ([][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		return nil, errors.New("source down")
	}
	return edgetls.ParseTicketKeys([]byte(strings.Join(f.keys, "")))
}

// TestTicketSourceDownAtStart: a key source that is down when the
// Terminator starts does not stop it (traefik#1689): it serves with a key
// of its own, says why in Status, and takes the source's keys at the first
// poll that succeeds, after which two nodes resume each other's tickets.
func TestTicketSourceDownAtStart(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	src := &flakySource{}
	opts := edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, Tickets: edgetls.TicketOptions{Source: src}, ReloadInterval: -1}
	a := start(t, opts)
	if s := a.term.Status().Tickets; !strings.Contains(s.LastError, "source down") || s.Keys != 1 {
		t.Fatalf("status with the source down: %+v, want its error and one key of its own", s)
	}
	c := resumeClient(p, tls.VersionTLS13)
	mustDial(t, a.addr, c)
	if !mustDial(t, a.addr, c).DidResume {
		t.Fatal("no resumption on the node itself while the source is down")
	}

	key := newKeyLine(80)
	src.set(key)
	b := start(t, opts)
	ctx := context.Background()
	if err := a.term.PollTicketKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if s := a.term.Status().Tickets; s.LastError != "" {
		t.Fatalf("status after the source came back: %+v", s)
	}
	c = resumeClient(p, tls.VersionTLS13)
	mustDial(t, a.addr, c)
	if !mustDial(t, b.addr, c).DidResume {
		t.Fatal("once the source is back, the nodes do not share keys")
	}
}

// TestTLS13TicketLifetimeHint pins what clients are told: crypto/tls sets
// ticket_lifetime in every TLS 1.3 NewSessionTicket to its constant
// maxSessionTicketLifetime (7 days, crypto/tls/common.go) in
// sendSessionTickets (crypto/tls/handshake_server_tls13.go), and neither tls.Config
// nor WrapSession can change it, while edge honours a ticket for
// RotateEvery*Keep only. If a Go release lets a server choose the lifetime,
// this test fails: advertise ticketMaxAge then, and update docs/TLS.md.
func TestTLS13TicketLifetimeHint(t *testing.T) {
	bin := needOpenSSL(t)
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, OCSP: edgetls.OCSPOptions{Disabled: true}})
	if got := e.term.Status().Tickets.MaxAge; got != "3h0m0s" {
		t.Fatalf("max_age: got %s, want 3h0m0s", got)
	}
	sess := filepath.Join(t.TempDir(), "sess.pem")
	sClientSessOut(t, e.addr, sess, "-tls1_3", "-servername", "a.example.com")
	out, err := exec.Command(bin, "sess_id", "-in", sess, "-noout", "-text").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl sess_id: %v\n%s", err, out)
	}
	if want := "TLS session ticket lifetime hint: 604800 (seconds)"; !strings.Contains(string(out), want) {
		t.Errorf("openssl sess_id -text lacks %q (has crypto/tls started to let servers choose it?):\n%s", want, out)
	}
}

package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAdminBase: an admin listener on every address is asked on
// loopback; a named address as it is; a bad one is refused with its
// setting's name.
func TestAdminBase(t *testing.T) {
	for addr, want := range map[string]string{
		":9901":          "http://127.0.0.1:9901",
		"0.0.0.0:9901":   "http://127.0.0.1:9901",
		"[::]:9901":      "http://127.0.0.1:9901",
		"127.0.0.2:9901": "http://127.0.0.2:9901",
		"[::1]:9901":     "http://[::1]:9901",
		"localhost:9901": "http://localhost:9901",
	} {
		if got, err := adminBase(addr); err != nil || got != want {
			t.Errorf("adminBase(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, err := adminBase("9901"); err == nil || !strings.Contains(err.Error(), "admin.address") {
		t.Errorf("adminBase(\"9901\"): %v, want an error naming admin.address", err)
	}
}

// TestLocalDialerRefusesOtherHosts: the credential's connection is made
// to loopback and to this host's own addresses only; any other address
// is refused before a packet leaves, with ErrNotLocal, and so is the
// client's upgrade request.
func TestLocalDialerRefusesOtherHosts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := LocalDialer().Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("loopback: %v", err)
	}
	c.Close()
	// 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never this host's.
	if _, err := LocalDialer().Dial("tcp", "192.0.2.1:9901"); !errors.Is(err, ErrNotLocal) {
		t.Errorf("192.0.2.1: %v, want ErrNotLocal", err)
	}
	if ownAddress(netip.MustParseAddr("192.0.2.1")) {
		t.Error("ownAddress(192.0.2.1) = true")
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !ownAddress(ip.Unmap()) {
				t.Errorf("ownAddress(%s) = false for this host's interface address", ip)
			}
		}
	}
	cl, err := NewClient("192.0.2.1:9901", "secret", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RequestUpgrade(func(string) {}); !errors.Is(err, ErrNotLocal) || !strings.Contains(err.Error(), "http://192.0.2.1:9901") {
		t.Errorf("RequestUpgrade to 192.0.2.1: %v, want ErrNotLocal naming the address", err)
	}
}

// fakeEdge answers the upgrade client as an edge does: POST
// /api/v1/upgrade (with the token, once /status has reported the same
// fleet wait twice) and /status, from the old process until it answered
// the upgrade and from the new one after.
type fakeEdge struct {
	mu       sync.Mutex
	waits    int
	answered bool
	tokens   []string
	polled   chan struct{}
	proofs   proofs
}

// answerChallenge answers POST /api/v1/challenge as edge does, for the
// token "secret".
func answerChallenge(w http.ResponseWriter, r *http.Request, p *proofs) {
	var b struct {
		ClientNonce string `json:"client_nonce"`
	}
	_ = json.NewDecoder(r.Body).Decode(&b)
	ns := p.issue(time.Now())
	_ = json.NewEncoder(w).Encode(map[string]string{"nonce": ns, "proof": serverProof("secret", b.ClientNonce, ns)})
}

func (f *fakeEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.tokens = append(f.tokens, r.Header.Get("Authorization"))
	f.mu.Unlock()
	switch r.URL.Path {
	case "/api/v1/challenge":
		answerChallenge(w, r, &f.proofs)
	case "/status":
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.answered {
			_ = json.NewEncoder(w).Encode(map[string]any{"pid": 200, "version": "v2"})
			return
		}
		f.waits++
		if f.waits == 2 {
			close(f.polled)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"pid": 100, "version": "v1", "upgrade": "waiting for a fleet upgrade slot: held by edge-a"})
	case "/api/v1/upgrade":
		if !f.proofs.proven(r, "secret", time.Now()) {
			http.Error(w, "no proof", http.StatusUnauthorized)
			return
		}
		<-f.polled
		f.mu.Lock()
		f.answered = true
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(UpgradeAnswer{Result: "ok", Binary: "/usr/bin/edge", OldPID: 100})
	default:
		http.NotFound(w, r)
	}
}

// TestClientRequestUpgrade: the client never sends its token, proves it
// under the nonce of a listener that proved it knows it, reports a fleet wait once however often /status repeats it, and gives
// the old process's answer with the new process's pid and version.
func TestClientRequestUpgrade(t *testing.T) {
	f := &fakeEdge{polled: make(chan struct{})}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := NewClient(srv.Listener.Addr().String(), "secret", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var waits []string
	up, err := c.RequestUpgrade(func(st string) { waits = append(waits, st) })
	if err != nil {
		t.Fatal(err)
	}
	if up.Binary != "/usr/bin/edge" || up.OldPID != 100 || up.PID != 200 || up.Version != "v2" {
		t.Errorf("RequestUpgrade = %+v, want /usr/bin/edge, old 100, new 200 v2", up)
	}
	if len(waits) != 1 || waits[0] != "waiting for a fleet upgrade slot: held by edge-a" {
		t.Errorf("waits reported: %q, want the one wait once", waits)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tok := range f.tokens {
		if strings.Contains(tok, "secret") || strings.HasPrefix(tok, "Bearer") {
			t.Errorf("a request carried Authorization %q: the token itself", tok)
		}
	}
}

// TestClientSendsNothingSecretToASquatter: another local user listening
// on the admin address while edge is down answers the challenge without
// knowing the token. The client stops there with ErrNotEdge: the only
// request the squatter saw is the challenge, with a random nonce, and no
// credential at all.
func TestClientSendsNothingSecretToASquatter(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(b))
		mu.Unlock()
		// A plausible answer: a nonce and a proof made with a guess.
		_ = json.NewEncoder(w).Encode(map[string]string{"nonce": strings.Repeat("ab", 32), "proof": serverProof("guess", "", "")})
	}))
	defer srv.Close()
	c, err := NewClient(srv.Listener.Addr().String(), "secret-token-of-edge", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RequestUpgrade(func(string) {}); !errors.Is(err, ErrNotEdge) {
		t.Fatalf("RequestUpgrade to a squatter: %v, want ErrNotEdge", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "POST /api/v1/challenge  ") || strings.Contains(seen[0], "secret") {
		t.Fatalf("the squatter saw %q, want the challenge alone, without a credential", seen)
	}
}

// TestProofIsUsedOnce: a request's proof is accepted once; replayed, or
// for another path, or under a nonce edge never issued, it is refused.
func TestProofIsUsedOnce(t *testing.T) {
	var p proofs
	now := time.Now()
	req := func(path, auth string) *http.Request {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("Authorization", auth)
		return r
	}
	ns := p.issue(now)
	good := proofScheme + ns + " " + clientProof("secret", ns, "POST", "/api/v1/upgrade")
	if !p.proven(req("/api/v1/upgrade", good), "secret", now) {
		t.Fatal("a fresh proof was refused")
	}
	if p.proven(req("/api/v1/upgrade", good), "secret", now) {
		t.Fatal("a replayed proof was accepted")
	}
	ns = p.issue(now)
	other := proofScheme + ns + " " + clientProof("secret", ns, "POST", "/api/v1/upgrade")
	if p.proven(req("/api/v1/pools/app/backends/b1/drain", other), "secret", now) {
		t.Fatal("a proof for another path was accepted")
	}
	forged := strings.Repeat("cd", 32)
	if p.proven(req("/api/v1/upgrade", proofScheme+forged+" "+clientProof("secret", forged, "POST", "/api/v1/upgrade")), "secret", now) {
		t.Fatal("a nonce edge never issued was accepted")
	}
	ns = p.issue(now)
	late := proofScheme + ns + " " + clientProof("secret", ns, "POST", "/api/v1/upgrade")
	if p.proven(req("/api/v1/upgrade", late), "secret", now.Add(proofTTL+time.Second)) {
		t.Fatal("a proof past its nonce's lifetime was accepted")
	}
	// A server proof, which anyone can ask for, never passes as a client's.
	ns = p.issue(now)
	if p.proven(req("/api/v1/upgrade", proofScheme+ns+" "+serverProof("secret", ns, "POST /api/v1/upgrade")), "secret", now) {
		t.Fatal("a server proof passed as a client's")
	}
}

// TestClientUpgradeRefused: an answer other than 200 is an error with
// the status and the API's reason, or the body when it has none.
func TestClientUpgradeRefused(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":"an upgrade is under way"}`: "409 Conflict: an upgrade is under way",
		"not json\n":                          "409 Conflict: not json",
	} {
		var ps proofs
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/challenge" {
				answerChallenge(w, r, &ps)
				return
			}
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(body))
		}))
		c, err := NewClient(srv.Listener.Addr().String(), "secret", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.RequestUpgrade(func(string) {}); err == nil || err.Error() != want {
			t.Errorf("answer %q: %v, want %q", body, err, want)
		}
		srv.Close()
	}
}

package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Proving the token without sending it.
//
// edge -upgrade talks to whatever listens on admin.address. While edge is
// down, another local user may listen there; a client that sent its
// bearer token would hand that user the token that drives the upgrade
// endpoint. So edge's own client never sends the token. It proves it
// knows it, after the listener proved it knows it too:
//
//	client -> POST /api/v1/challenge {"client_nonce": Nc}          (32 random bytes, hex)
//	edge   <- {"nonce": Ns, "proof": HMAC-SHA256(token, "edge admin server\x00" || Nc || Ns)}
//	client    checks the proof (hmac.Equal); a listener that cannot make it is not edge: stop
//	client -> POST /api/v1/upgrade
//	          Authorization: Edge-Proof <Ns> <HMAC-SHA256(token, "edge admin client\x00" || Ns || METHOD || " " || PATH)>
//
// edge accepts each Ns once, within proofTTL of the challenge. A squatter
// learns Nc, which is random, and at most the client's first request;
// nothing it can replay (the proof names a nonce only edge issued, and
// only once) and nothing that tells the token. The two labels keep a
// server proof from ever passing as a client's: anyone who reaches the
// admin listener may ask for challenges (an oracle of server proofs), so
// that oracle must not forge client proofs. Bearer tokens stay accepted
// for operators' own calls (curl), where they chose the address.

const (
	proofTTL       = 30 * time.Second
	maxProofNonces = 1024
	proofScheme    = "Edge-Proof "
)

// proofs holds the nonces edge issued and not yet used: at most
// maxProofNonces (the oldest goes first), each for proofTTL.
type proofs struct {
	mu    sync.Mutex
	at    map[string]time.Time
	order []string
}

func proofMAC(token, label string, parts ...string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(label))
	m.Write([]byte{0})
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// serverProof is what edge answers a challenge with client nonce nc.
func serverProof(token, nc, ns string) string {
	return hex.EncodeToString(proofMAC(token, "edge admin server", nc, ns))
}

// clientProof is the credential of a request method path under nonce ns.
func clientProof(token, ns, method, path string) string {
	return hex.EncodeToString(proofMAC(token, "edge admin client", ns, method, " ", path))
}

// issue returns a fresh nonce, remembered until used or expired.
func (p *proofs) issue(now time.Time) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	ns := hex.EncodeToString(b[:])
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[string]time.Time{}
	}
	for len(p.order) > 0 && (len(p.order) >= maxProofNonces || now.Sub(p.at[p.order[0]]) > proofTTL) {
		delete(p.at, p.order[0])
		p.order = p.order[1:]
	}
	p.at[ns] = now
	p.order = append(p.order, ns)
	return ns
}

// use consumes ns and reports whether it was issued within proofTTL and
// not used before.
func (p *proofs) use(ns string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.at[ns]
	if !ok {
		return false
	}
	delete(p.at, ns) // once, whatever comes of it; order keeps a stale name, skipped when it comes up
	return now.Sub(at) <= proofTTL
}

// proven reports whether r carries a valid Edge-Proof for token.
func (p *proofs) proven(r *http.Request, token string, now time.Time) bool {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), proofScheme)
	if !ok || token == "" {
		return false
	}
	ns, mac, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || len(ns) != 64 || !p.use(ns, now) {
		return false
	}
	want := clientProof(token, ns, r.Method, r.URL.Path)
	return hmac.Equal([]byte(mac), []byte(want))
}

// challenge is POST /api/v1/challenge: a nonce and the proof that this
// listener knows the token.
func (a *api) challenge(r *http.Request) (any, error) {
	s := a.settings.Load()
	if s.Token == "" {
		return nil, Errorf(http.StatusForbidden, "no token to prove: write operations are off")
	}
	var body struct {
		ClientNonce string `json:"client_nonce"`
	}
	if err := DecodeBody(r, &body); err != nil {
		return nil, err
	}
	if b, err := hex.DecodeString(body.ClientNonce); err != nil || len(b) != 32 {
		return nil, Errorf(http.StatusBadRequest, "client_nonce: 32 random bytes, hex")
	}
	ns := a.proofs.issue(time.Now())
	return map[string]string{"nonce": ns, "proof": serverProof(s.Token, body.ClientNonce, ns)}, nil
}

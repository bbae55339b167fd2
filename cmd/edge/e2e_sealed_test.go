package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/internal/consultest"
)

// TestSealedTicketKeysOpenSSL, with a real Consul agent and openssl
// s_client: two edges sharing the seal key resume each other's sessions
// (TLS 1.3 and 1.2), while the fleet's entry in Consul KV holds none of the
// keys; an edge with another seal key refuses the entry, says so in its
// log, /status and metrics, leaves the entry as it is, and serves with
// keys of its own: its own sessions resume on it, the fleet's do not.
func TestSealedTicketKeysOpenSSL(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1")
	dir := t.TempDir()
	certFile, keyFile, _ := writeCert(t, dir)
	seal := sealKeyFile(t, dir)
	a, _, _ := startSealedTicketKeysEdge(t, agent.Addr, bs[0].Addr(), dir, certFile, keyFile, seal)
	b, _, _ := startSealedTicketKeysEdge(t, agent.Addr, bs[0].Addr(), dir, certFile, keyFile, seal)

	entry, _, err := agent.Client.KV().Get("edge/ticket-keys", nil)
	if err != nil || entry == nil {
		t.Fatalf("no entry: %v %v", entry, err)
	}
	keys := openSealed(t, seal, "edge/ticket-keys", entry.Flags, entry.Value)
	if len(keys) < 2 {
		t.Fatalf("the entry opens to %d keys, want the encrypting and the staged one", len(keys))
	}
	for i, k := range keys {
		if bytes.Contains(entry.Value, []byte(base64.StdEncoding.EncodeToString(k))) {
			t.Fatalf("key %d stands in the entry in base64", i+1)
		}
		for j := 0; j+8 <= len(k); j++ {
			if bytes.Contains(entry.Value, k[j:j+8]) {
				t.Fatalf("8 raw bytes of key %d stand in the entry", i+1)
			}
		}
	}

	sess := map[string]string{}
	for _, v := range []string{"-tls1_3", "-tls1_2"} {
		sess[v] = filepath.Join(dir, "fleet"+v)
		if out := opensslSession(t, a, v, "-sess_out", sess[v]); !strings.Contains(out, "New,") {
			t.Fatalf("openssl %s on the first edge:\n%s", v, out)
		}
		if out := opensslSession(t, b, v, "-sess_in", sess[v]); !strings.Contains(out, "Reused,") {
			t.Fatalf("openssl %s: a session of the first edge is not resumed on the second:\n%s", v, out)
		}
	}

	otherDir := filepath.Join(dir, "other")
	if err := os.Mkdir(otherDir, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(otherDir, "ticket-seal.key")
	writeFile(t, other, "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\n")
	if err := os.Chmod(other, 0o600); err != nil {
		t.Fatal(err)
	}
	c, cAdmin, cProc := startSealedTicketKeysEdge(t, agent.Addr, bs[0].Addr(), dir, certFile, keyFile, other)
	cProc.waitLog(t, "refused (unopened)")
	if st := adminGet(t, cAdmin, "/status"); !strings.Contains(st, `"refused": "unopened"`) {
		t.Errorf("/status of the edge with another seal key does not say the entry is refused:\n%s", st)
	}
	if m := adminGet(t, cAdmin, "/metrics"); !hasSeries(m, "edge_tls_ticket_keys_refused{", " 1") {
		t.Errorf("edge_tls_ticket_keys_refused is not 1 on the edge with another seal key:\n%s", grepLines(m, "edge_tls_ticket_keys_refused"))
	}
	if out := opensslSession(t, c, "-tls1_3", "-sess_in", sess["-tls1_3"]); !strings.Contains(out, "New,") {
		t.Fatalf("an edge with another seal key resumed a fleet session:\n%s", out)
	}
	own := filepath.Join(dir, "own")
	if out := opensslSession(t, c, "-tls1_3", "-sess_out", own); !strings.Contains(out, "New,") {
		t.Fatalf("openssl on the edge with another seal key:\n%s", out)
	}
	if out := opensslSession(t, c, "-tls1_3", "-sess_in", own); !strings.Contains(out, "Reused,") {
		t.Fatalf("the edge with another seal key does not resume its own sessions:\n%s", out)
	}
	after, _, err := agent.Client.KV().Get("edge/ticket-keys", nil)
	if err != nil || after == nil || after.ModifyIndex != entry.ModifyIndex {
		t.Fatalf("the entry changed under an edge with another seal key: %v %v", after, err)
	}
	if out := opensslSession(t, b, "-tls1_2", "-sess_in", sess["-tls1_2"]); !strings.Contains(out, "Reused,") {
		t.Fatalf("the fleet no longer resumes its sessions:\n%s", out)
	}
}

// hasSeries reports whether a line of the exposition m starts with prefix
// and ends with suffix.
func hasSeries(m, prefix, suffix string) bool {
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, prefix) && strings.HasSuffix(l, suffix) {
			return true
		}
	}
	return false
}

// openSealed opens the sealed value v of the entry at path with the key
// in the file seal, from the format fleet/sealedentry.go documents,
// and returns the raw keys.
func openSealed(t *testing.T, seal, path string, flags uint64, v []byte) [][]byte {
	t.Helper()
	key, err := (&conf.SessionTickets{ConsulSealKeyFile: seal}).SealKey()
	if err != nil {
		t.Fatal(err)
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(string(v)), "edge-sealed-v1 ")
	if !ok {
		t.Fatalf("the entry is not sealed: %q", v)
	}
	box, err := base64.StdEncoding.DecodeString(body)
	if err != nil || len(box) < 12 {
		t.Fatalf("sealed body: %v", err)
	}
	blk, _ := aes.NewCipher(key)
	g, _ := cipher.NewGCM(blk)
	ad := binary.BigEndian.AppendUint64([]byte("edge-sealed-v1\x00"+path+"\x00"), flags)
	plain, err := g.Open(nil, box[:12], box[12:], ad)
	if err != nil {
		t.Fatalf("the entry does not open with the fleet's seal key: %v", err)
	}
	var keys [][]byte
	for _, l := range strings.Fields(string(plain)) {
		k, err := base64.StdEncoding.DecodeString(l)
		if err != nil {
			t.Fatalf("key line %q: %v", l, err)
		}
		keys = append(keys, k)
	}
	return keys
}

package discovery

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
	"github.com/hashicorp/consul/api"
)

// TestSealedTicketKeys, with a real Consul agent: the entry an edge
// writes holds none of the keys in the clear, another edge with the seal
// key reads the same keys and rotates them sealed; an edge with another
// seal key, and any edge meeting an entry written in the clear, refuses
// the entry and leaves it as it is.
func TestSealedTicketKeys(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	clk := &clock{t: time.Now()}
	seal := bytes.Repeat([]byte{7}, 32)
	opts := TicketKeysOptions{Key: "edge/sealed", RotateEvery: time.Hour, Keep: 2, Now: clk.now, SealKey: seal}
	a, b := NewTicketKeys(boundedClient(t, agent.Addr), opts), NewTicketKeys(boundedClient(t, agent.Addr), opts)
	keys := fetchLines(t, a)
	raw := func() []byte {
		p, _, err := agent.Client.KV().Get("edge/sealed", nil)
		if err != nil || p == nil {
			t.Fatalf("entry: %v %v", p, err)
		}
		return p.Value
	}
	stored := raw()
	if !bytes.HasPrefix(stored, []byte(sealedPrefix)) {
		t.Fatalf("the entry is not sealed: %q", stored)
	}
	for _, k := range keys {
		if bytes.Contains(stored, []byte(k)) {
			t.Fatalf("key %s stands in the clear in the entry", k)
		}
	}
	if got := fetchLines(t, b); strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Fatalf("a second edge with the seal key reads %v, want %v", got, keys)
	}
	clk.add(61 * time.Minute)
	if got := fetchLines(t, b); len(got) != 3 || got[0] != keys[1] || !bytes.HasPrefix(raw(), []byte(sealedPrefix)) {
		t.Fatalf("after a rotation: %v (entry %q), want the staged key first, sealed", got, raw())
	}

	before := raw()
	other := NewTicketKeys(boundedClient(t, agent.Addr), TicketKeysOptions{Key: "edge/sealed", Now: clk.now, SealKey: bytes.Repeat([]byte{8}, 32)})
	clk.add(2 * time.Hour) // due: it would rotate, were it to trust the entry
	if _, err := other.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "does not open") {
		t.Fatalf("another seal key: %v, want a refusal", err)
	}
	if !bytes.Equal(raw(), before) {
		t.Fatal("an edge with another seal key overwrote the entry")
	}

	plain := []byte("AAAA\nBBBB\n")
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: "edge/clear", Value: plain}, nil); err != nil {
		t.Fatal(err)
	}
	legacy := NewTicketKeys(boundedClient(t, agent.Addr), TicketKeysOptions{Key: "edge/clear", Now: clk.now, SealKey: seal})
	if _, err := legacy.Fetch(context.Background()); !errors.Is(err, errUnsealed) {
		t.Fatalf("an entry in the clear: %v, want errUnsealed", err)
	}
	if p, _, _ := agent.Client.KV().Get("edge/clear", nil); p == nil || !bytes.Equal(p.Value, plain) {
		t.Fatal("an entry in the clear was overwritten")
	}
}

// FuzzOpenEntry: no value opens without the seal key, and none panics.
func FuzzOpenEntry(f *testing.F) {
	a := newSealer(bytes.Repeat([]byte{7}, 32))
	f.Add(sealEntry(a, "edge/k", []byte("AAAA\n")))
	f.Add([]byte(sealedPrefix + "AAAA"))
	f.Add([]byte("AAAA\nBBBB\n"))
	other := newSealer(bytes.Repeat([]byte{9}, 32))
	f.Fuzz(func(t *testing.T, v []byte) {
		if _, err := openEntry(other, "edge/k", v); err == nil {
			t.Fatalf("%q opened with a key that sealed nothing", v)
		}
		_, _ = openEntry(a, "edge/k", v)
	})
}

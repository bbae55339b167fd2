package fleet

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
	"github.com/hashicorp/consul/api"
)

// refusedWhy is why err refused the entry, "" when it is no refusal.
func refusedWhy(err error) string {
	var r *RefusedEntryError
	if errors.As(err, &r) {
		return r.Why
	}
	return ""
}

// TestSealedTicketKeys, with a real Consul agent: the entry an edge
// writes holds none of the keys, neither as the base64 lines the edges
// use nor as raw bytes; another edge with the seal key reads the same keys
// and rotates them sealed; an edge with another seal key refuses the
// entry and leaves it as it is, even when it is due.
func TestSealedTicketKeys(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	clk := &clock{t: time.Now()}
	seal := bytes.Repeat([]byte{7}, 32)
	opts := TicketKeysOptions{Key: "edge/sealed", RotateEvery: time.Hour, Keep: 2, Now: clk.now, SealKey: seal}
	a, b := NewTicketKeys(boundedClient(t, agent.Addr), opts), NewTicketKeys(boundedClient(t, agent.Addr), opts)
	keys := fetchLines(t, a)
	raw := func() *api.KVPair {
		p, _, err := agent.Client.KV().Get("edge/sealed", nil)
		if err != nil || p == nil {
			t.Fatalf("entry: %v %v", p, err)
		}
		return p
	}
	stored := raw().Value
	if !bytes.HasPrefix(stored, sealedPrefix) {
		t.Fatalf("the entry is not sealed: %q", stored)
	}
	assertNoKeyIn(t, stored, keys)
	if got := fetchLines(t, b); strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Fatalf("a second edge with the seal key reads %v, want %v", got, keys)
	}
	clk.add(61 * time.Minute)
	rotated := fetchLines(t, b)
	if len(rotated) != 3 || rotated[0] != keys[1] || !bytes.HasPrefix(raw().Value, sealedPrefix) {
		t.Fatalf("after a rotation: %v (entry %q), want the staged key first, sealed", rotated, raw().Value)
	}
	assertNoKeyIn(t, raw().Value, rotated)

	before := raw()
	other := NewTicketKeys(boundedClient(t, agent.Addr), TicketKeysOptions{Key: "edge/sealed", Now: clk.now, SealKey: bytes.Repeat([]byte{8}, 32)})
	clk.add(2 * time.Hour) // due: it would rotate, were it to trust the entry
	if _, err := other.Fetch(context.Background()); refusedWhy(err) != RefusedUnopened || !strings.Contains(err.Error(), `"edge/sealed"`) {
		t.Fatalf("another seal key: %v, want a refusal naming the entry", err)
	}
	if after := raw(); after.ModifyIndex != before.ModifyIndex {
		t.Fatal("an edge with another seal key overwrote the entry")
	}
}

// assertNoKeyIn fails when v, or the base64 body of a sealed v, holds
// any of keys (base64 lines) or any 16 bytes of one of them decoded.
func assertNoKeyIn(t *testing.T, v []byte, keys []string) {
	t.Helper()
	hay := [][]byte{v}
	if body, err := base64.StdEncoding.DecodeString(strings.TrimSpace(strings.TrimPrefix(string(v), string(sealedPrefix)))); err == nil {
		hay = append(hay, body)
	}
	for _, k := range keys {
		rawKey, err := base64.StdEncoding.DecodeString(k)
		if err != nil || len(rawKey) < 16 {
			t.Fatalf("key line %q", k)
		}
		for _, h := range hay {
			if bytes.Contains(h, []byte(k)) {
				t.Fatalf("key %s stands in the clear in the entry", k)
			}
			for i := 0; i+16 <= len(rawKey); i += 16 {
				if bytes.Contains(h, rawKey[i:i+16]) {
					t.Fatalf("16 raw bytes of key %s stand in the entry", k)
				}
			}
		}
	}
}

// TestSealedEntryRefusals, with a real Consul agent: what a writer of the
// entry without the seal key can put there. A sealed value moved from
// another path, given another rotation time, changed, or of an unknown
// version does not open and is never overwritten; an oversized one is
// refused unread; one in the clear is never used, and once due is
// replaced by fresh keys, sealed.
func TestSealedEntryRefusals(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	kv := agent.Client.KV()
	clk := &clock{t: time.Now()}
	seal := bytes.Repeat([]byte{7}, 32)
	put := func(key string, v []byte, flags uint64) uint64 {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: key, Value: v, Flags: flags}, nil); err != nil {
			t.Fatal(err)
		}
		p, _, err := kv.Get(key, nil)
		if err != nil || p == nil {
			t.Fatalf("%s: %v", key, err)
		}
		return p.ModifyIndex
	}
	edgeFor := func(key string) *TicketKeys {
		return NewTicketKeys(boundedClient(t, agent.Addr), TicketKeysOptions{Key: key, RotateEvery: time.Hour, Now: clk.now, SealKey: seal})
	}
	// A genuine entry at edge/a, as an edge of the fleet wrote it.
	genuine := fetchLines(t, edgeFor("edge/a"))
	pa, _, _ := kv.Get("edge/a", nil)
	stamp := pa.Flags
	sealer := newSealer(seal)
	plain := []byte(strings.Join(genuine, "\n") + "\n")
	changed := func(key string) []byte {
		v := sealEntry(sealer, key, stamp, plain)
		i := len(sealedPrefix) + 20
		if v[i] == 'A' {
			v[i] = 'B'
		} else {
			v[i] = 'A'
		}
		return v
	}
	for _, tc := range []struct {
		name  string
		value func(key string) []byte
		flags uint64
		why   string
	}{
		{"moved from another path", func(string) []byte { return pa.Value }, stamp, RefusedUnopened},
		{"another rotation time", func(k string) []byte { return sealEntry(sealer, k, stamp, plain) }, stamp - 7200, RefusedUnopened},
		{"changed", changed, stamp, RefusedUnopened},
		{"unknown version", func(string) []byte { return []byte("edge-sealed-v2 AAAA\n") }, stamp, RefusedVersion},
		{"oversized", func(string) []byte { return bytes.Repeat([]byte("A"), MaxTicketKeysBytes+1) }, stamp, RefusedOversized},
		{"truncated", func(string) []byte { return append(bytes.Clone(sealedPrefix), "AAAA"...) }, stamp, RefusedUnopened},
	} {
		key := "edge/" + strings.ReplaceAll(tc.name, " ", "-")
		index := put(key, tc.value(key), tc.flags)
		tk := edgeFor(key)
		for _, when := range []string{"now", "three hours later, due"} {
			if _, err := tk.Fetch(context.Background()); refusedWhy(err) != tc.why {
				t.Errorf("%s (%s): %v, want refused %s", tc.name, when, err, tc.why)
			}
			if p, _, _ := kv.Get(key, nil); p == nil || p.ModifyIndex != index {
				t.Errorf("%s (%s): the entry was overwritten", tc.name, when)
			}
			clk.add(3 * time.Hour)
		}
	}

	// In the clear: an older edge's entry, or a writer's keys.
	legacy := []byte(genuine[0] + "\n" + genuine[1] + "\n")
	put("edge/clear", legacy, uint64(clk.now().Unix()))
	tk := edgeFor("edge/clear")
	if _, err := tk.Fetch(context.Background()); refusedWhy(err) != RefusedUnsealed || !errors.Is(err, errUnsealed) {
		t.Fatalf("an entry in the clear: %v, want it refused", err)
	}
	if p, _, _ := kv.Get("edge/clear", nil); p == nil || !bytes.Equal(p.Value, legacy) {
		t.Fatal("an entry in the clear was overwritten before it was due")
	}
	clk.add(61 * time.Minute)
	fresh := fetchLines(t, tk)
	for _, k := range fresh {
		if k == genuine[0] || k == genuine[1] {
			t.Fatalf("the keys of the entry in the clear were taken: %v", fresh)
		}
	}
	p, _, _ := kv.Get("edge/clear", nil)
	if p == nil || !bytes.HasPrefix(p.Value, sealedPrefix) || len(fresh) != 2 {
		t.Fatalf("a due entry in the clear became %q (keys %v), want two fresh keys sealed", p.Value, fresh)
	}
	if got := fetchLines(t, edgeFor("edge/clear")); strings.Join(got, ",") != strings.Join(fresh, ",") {
		t.Fatalf("another edge reads %v from the rewritten entry, want %v", got, fresh)
	}
}

// TestSealedFormat opens a value sealed from the format's description in
// sealedentry.go alone, so the format is pinned and not just the code's
// agreement with itself.
func TestSealedFormat(t *testing.T) {
	key := bytes.Repeat([]byte{0x42}, 32)
	b, _ := aes.NewCipher(key)
	g, _ := cipher.NewGCM(b)
	nonce := []byte("twelve bytes")
	ad := binary.BigEndian.AppendUint64([]byte("edge-sealed-v1\x00edge/k\x00"), 1700000000)
	box := g.Seal(bytes.Clone(nonce), nonce, []byte("AAAA\n"), ad)
	v := []byte("edge-sealed-v1 " + base64.StdEncoding.EncodeToString(box) + "\n")
	plain, err := openEntry(newSealer(key), "edge/k", 1700000000, v, MaxTicketKeysBytes)
	if err != nil || string(plain) != "AAAA\n" {
		t.Fatalf("open: %q %v", plain, err)
	}
	if _, err := openEntry(newSealer(key), "edge/k", 1700000000, v, len(v)-1); refusedWhy(err) != RefusedOversized {
		t.Fatalf("over the bound: %v", err)
	}
}

// FuzzOpenEntry: no value opens without the seal key it was sealed with,
// for another path or other Flags; none panics or passes the bound; what
// sealEntry seals opens to itself.
func FuzzOpenEntry(f *testing.F) {
	a := newSealer(bytes.Repeat([]byte{7}, 32))
	f.Add(sealEntry(a, "edge/k", 1, []byte("AAAA\n")), uint64(1))
	f.Add(append(bytes.Clone(sealedPrefix), "AAAA"...), uint64(0))
	f.Add([]byte("edge-sealed-v2 AAAA"), uint64(0))
	f.Add([]byte("AAAA\nBBBB\n"), uint64(0))
	other := newSealer(bytes.Repeat([]byte{9}, 32))
	const bound = 4096
	f.Fuzz(func(t *testing.T, v []byte, flags uint64) {
		if _, err := openEntry(other, "edge/k", flags, v, bound); err == nil {
			t.Fatalf("%q opened with a key that sealed nothing", v)
		}
		var r *RefusedEntryError
		plain, err := openEntry(a, "edge/k", flags, v, bound)
		switch {
		case err != nil && !errors.As(err, &r):
			t.Fatalf("%q: %v is no RefusedEntryError", v, err)
		case err == nil && len(v) > bound:
			t.Fatalf("%d bytes opened past the bound %d", len(v), bound)
		case err == nil:
			if _, err := openEntry(a, "edge/other", flags, v, bound); err == nil {
				t.Fatal("opened for another path")
			}
			if _, err := openEntry(a, "edge/k", flags+1, v, bound); err == nil {
				t.Fatal("opened with other Flags")
			}
		}
		if len(v) <= 1024 {
			got, err := openEntry(a, "edge/k", flags, sealEntry(a, "edge/k", flags, v), bound)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("sealed %q opens to %q, %v", v, got, err)
			}
		}
		_ = plain
	})
}

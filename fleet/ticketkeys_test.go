package fleet

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
	"github.com/hashicorp/consul/api"
)

// clock is a settable time source: rotation is due by the entry's stamp,
// and the test moves time instead of waiting an hour.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func fetchLines(t *testing.T, tk *TicketKeys) []string {
	t.Helper()
	v, err := tk.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return keyLines(v)
}

// TestTicketKeysRotateInConsul: the first edge creates the entry with an
// encrypting and a staged key; nothing changes before rotate_every; then
// the staged key encrypts, a fresh one is staged and old keys stay
// accepted up to keep. A second edge reads the same keys, and two edges
// due at once rotate once between them.
func TestTicketKeysRotateInConsul(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	clk := &clock{t: time.Now()}
	opts := TicketKeysOptions{Key: "edge/ticket-keys", RotateEvery: time.Hour, Keep: 2, Now: clk.now}
	a, b := NewTicketKeys(boundedClient(t, agent.Addr), opts), NewTicketKeys(boundedClient(t, agent.Addr), opts)

	first := fetchLines(t, a)
	if len(first) != 2 {
		t.Fatalf("created entry has %d keys, want 2 (encrypting, staged)", len(first))
	}
	if got := fetchLines(t, b); strings.Join(got, ",") != strings.Join(first, ",") {
		t.Fatalf("second edge reads %v, want %v", got, first)
	}
	clk.add(59 * time.Minute)
	if got := fetchLines(t, a); strings.Join(got, ",") != strings.Join(first, ",") {
		t.Fatal("rotated before rotate_every")
	}

	clk.add(2 * time.Minute)
	// Both edges are due; whichever writes first wins, the other reads it.
	var wg sync.WaitGroup
	got := make([][]string, 2)
	for i, tk := range []*TicketKeys{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := tk.Fetch(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = keyLines(v)
		}()
	}
	wg.Wait()
	if strings.Join(got[0], ",") != strings.Join(got[1], ",") {
		t.Fatalf("edges disagree after a rotation: %v and %v", got[0], got[1])
	}
	second := got[0]
	if len(second) != 3 || second[0] != first[1] || second[2] != first[0] || second[1] == first[0] || second[1] == first[1] {
		t.Fatalf("after one rotation %v, want [staged, fresh, old encrypting] from %v", second, first)
	}

	clk.add(time.Hour)
	third := fetchLines(t, a)
	if len(third) != 3 || third[0] != second[1] || third[2] != second[0] {
		t.Fatalf("after two rotations %v from %v: keep 2 plus the staged key", third, second)
	}
	for _, k := range third {
		if k == first[0] {
			t.Fatalf("a key older than keep is still accepted: %v", third)
		}
	}
}

// TestTicketKeysBadEntryIsKept: an entry that does not validate is
// reported with its path and never overwritten; an unreachable Consul is
// an error (the edge keeps the keys it has).
func TestTicketKeysBadEntryIsKept(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	kv := agent.Client.KV()
	bad := []byte("not a key\n")
	if _, err := kv.Put(&api.KVPair{Key: "edge/tk", Value: bad}, nil); err != nil {
		t.Fatal(err)
	}
	tk := NewTicketKeys(boundedClient(t, agent.Addr), TicketKeysOptions{Key: "edge/tk", Validate: func(v []byte) error {
		if strings.HasPrefix(string(v), "not") {
			return errors.New("line 1: not base64")
		}
		return nil
	}})
	_, err := tk.Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"edge/tk"`) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad entry: got %v, want an error naming the key and the line", err)
	}
	p, _, err := kv.Get("edge/tk", nil)
	if err != nil || p == nil || string(p.Value) != string(bad) {
		t.Fatalf("bad entry was changed: %v %v", p, err)
	}
	agent.Stop()
	if _, err := tk.Fetch(context.Background()); err == nil {
		t.Fatal("no error with Consul down")
	}
}

// TestTicketKeysParsed: with Parse, TicketKeys returns the entry's keys as
// Parse reads them, creating the entry first; a value Parse refuses is an
// error naming the key, and the entry is left as it was.
func TestTicketKeysParsed(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	// A stand-in for edgetls.ParseTicketKeys: base64 lines, no empty one.
	parse := func(v []byte) ([][]byte, error) {
		var out [][]byte
		for i, l := range strings.Split(strings.TrimSpace(string(v)), "\n") {
			k, err := base64.StdEncoding.DecodeString(l)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			out = append(out, k)
		}
		return out, nil
	}
	tk := NewTicketKeys(boundedClient(t, agent.Addr), TicketKeysOptions{Key: "edge/tk", Parse: parse})
	keys, err := tk.TicketKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A new entry: the encrypting key and the staged next one.
	if len(keys) != 2 || len(keys[0]) != ticketKeyBytes || bytes.Equal(keys[0], keys[1]) {
		t.Fatalf("keys of a new entry: %d, want 2 distinct keys of %d bytes", len(keys), ticketKeyBytes)
	}
	bad := []byte("not base64!\n")
	if _, err := agent.Client.KV().Put(&api.KVPair{Key: "edge/bad", Value: bad}, nil); err != nil {
		t.Fatal(err)
	}
	badKeys := NewTicketKeys(boundedClient(t, agent.Addr), TicketKeysOptions{Key: "edge/bad", Parse: parse})
	if _, err := badKeys.TicketKeys(context.Background()); err == nil || !strings.Contains(err.Error(), `"edge/bad"`) {
		t.Fatalf("a value Parse refuses: %v, want an error naming the key", err)
	}
	if p, _, err := agent.Client.KV().Get("edge/bad", nil); err != nil || p == nil || !bytes.Equal(p.Value, bad) {
		t.Fatalf("the refused entry was changed: %v %v", p, err)
	}
}

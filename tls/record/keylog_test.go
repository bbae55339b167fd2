package record

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func randomOf(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 16) }

func keyLogLine(label string, random []byte, secret []byte) []byte {
	return fmt.Appendf(nil, "%s %x %x\n", label, random, secret)
}

// TestKeyLogTake: both application secrets of a client random come back
// once; the other labels, TLS 1.2 lines and malformed lines are ignored;
// Write never fails; Forget drops an entry.
func TestKeyLogTake(t *testing.T) {
	k := NewKeyLog(time.Minute, 10, nil)
	r := randomOf(1)
	cs, ss := bytes.Repeat([]byte{0xc1}, 48), bytes.Repeat([]byte{0x51}, 48)
	for _, l := range [][]byte{
		keyLogLine("CLIENT_HANDSHAKE_TRAFFIC_SECRET", r, bytes.Repeat([]byte{9}, 32)),
		keyLogLine("CLIENT_RANDOM", r, bytes.Repeat([]byte{9}, 48)),
		[]byte("CLIENT_TRAFFIC_SECRET_0 zz " + hex.EncodeToString(cs) + "\n"),
		[]byte("CLIENT_TRAFFIC_SECRET_0 " + hex.EncodeToString(r) + " 0102\n"),
		[]byte("garbage\n\n"),
		keyLogLine("CLIENT_TRAFFIC_SECRET_0", r, cs),
	} {
		if n, err := k.Write(l); n != len(l) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", l, n, err)
		}
	}
	if _, _, ok := k.Take(r); ok {
		t.Fatal("Take with only the client secret logged")
	}
	k.Write(keyLogLine("SERVER_TRAFFIC_SECRET_0", r, ss))
	c, s, ok := k.Take(r)
	if !ok || !bytes.Equal(c, cs) || !bytes.Equal(s, ss) {
		t.Fatalf("Take: %v", ok)
	}
	if _, _, ok := k.Take(r); ok || k.Len() != 0 {
		t.Fatal("Take gave the secrets twice")
	}
	// Several lines in one Write, then Forget.
	r2 := randomOf(2)
	k.Write(append(keyLogLine("CLIENT_TRAFFIC_SECRET_0", r2, cs[:32]), keyLogLine("SERVER_TRAFFIC_SECRET_0", r2, ss[:32])...))
	k.Forget(r2)
	if _, _, ok := k.Take(r2); ok {
		t.Fatal("Take after Forget")
	}
	if _, _, ok := k.Take([]byte("short")); ok {
		t.Fatal("Take of a short random")
	}
}

// TestKeyLogBounded: entries expire after maxAge and the oldest go beyond
// maxEntries, so handshakes that never reach a takeover do not grow it;
// the insertion order is compacted when taken entries pile up.
func TestKeyLogBounded(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	k := NewKeyLog(time.Minute, 3, clock.now)
	sec := bytes.Repeat([]byte{7}, 32)
	both := func(i int) {
		k.Write(keyLogLine("CLIENT_TRAFFIC_SECRET_0", randomOf(i), sec))
		k.Write(keyLogLine("SERVER_TRAFFIC_SECRET_0", randomOf(i), sec))
	}
	both(1)
	clock.add(2 * time.Minute)
	if _, _, ok := k.Take(randomOf(1)); ok {
		t.Fatal("an expired entry was taken")
	}
	for i := 10; i < 15; i++ {
		both(i)
	}
	if k.Len() != 3 {
		t.Fatalf("%d entries, the bound is 3", k.Len())
	}
	if _, _, ok := k.Take(randomOf(10)); ok {
		t.Fatal("the oldest entry beyond the bound was kept")
	}
	if _, _, ok := k.Take(randomOf(14)); !ok {
		t.Fatal("the newest entry was dropped")
	}
	for i := 100; i < 1100; i++ {
		both(i)
		k.Take(randomOf(i))
	}
	k.mu.Lock()
	order := len(k.order)
	k.mu.Unlock()
	if order > 2*3+1 {
		t.Fatalf("the insertion order holds %d refs for a bound of 3", order)
	}
}

// TestKeyLogConcurrent: writers and takers at once (run with -race).
func TestKeyLogConcurrent(t *testing.T) {
	k := NewKeyLog(time.Minute, 64, nil)
	sec := bytes.Repeat([]byte{7}, 32)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				r := randomOf(g*1000 + i)
				k.Write(keyLogLine("CLIENT_TRAFFIC_SECRET_0", r, sec))
				k.Write(keyLogLine("SERVER_TRAFFIC_SECRET_0", r, sec))
				if _, _, ok := k.Take(r); !ok {
					t.Error("Take lost an entry")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestKeyLogSharedRandom: a second handshake with the same client random
// (a client chooses its random) makes the entry ambiguous, and Take
// refuses it instead of handing out either connection's secrets.
func TestKeyLogSharedRandom(t *testing.T) {
	k := NewKeyLog(time.Minute, 10, nil)
	r := randomOf(3)
	for _, b := range []byte{1, 2} {
		k.Write(keyLogLine("CLIENT_TRAFFIC_SECRET_0", r, bytes.Repeat([]byte{b}, 32)))
		k.Write(keyLogLine("SERVER_TRAFFIC_SECRET_0", r, bytes.Repeat([]byte{b + 10}, 32)))
	}
	if _, _, ok := k.Take(r); ok {
		t.Fatal("Take handed out the secrets of a random two handshakes share")
	}
	if k.Len() != 0 {
		t.Fatal("the ambiguous entry was kept")
	}
}

// TestKeyLogTakenLeaveNothing: secrets taken or forgotten leave nothing
// behind, however large the bound: an edge holding 10,000 WebSockets must
// not hold 10,000 dead key log entries.
func TestKeyLogTakenLeaveNothing(t *testing.T) {
	k := NewKeyLog(time.Minute, 1<<16, nil)
	sec := bytes.Repeat([]byte{7}, 32)
	for i := range 10000 {
		k.Write(keyLogLine("CLIENT_TRAFFIC_SECRET_0", randomOf(i), sec))
		k.Write(keyLogLine("SERVER_TRAFFIC_SECRET_0", randomOf(i), sec))
		if i%2 == 0 {
			if _, _, ok := k.Take(randomOf(i)); !ok {
				t.Fatalf("entry %d not taken", i)
			}
		} else {
			k.Forget(randomOf(i))
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.entries) != 0 || len(k.order) > 64 {
		t.Fatalf("%d entries and %d refs left after every secret was taken or forgotten", len(k.entries), len(k.order))
	}
}

package record

import (
	"bytes"
	"encoding/hex"
	"sync"
	"time"
)

// KeyLog is an io.Writer for tls.Config.KeyLogWriter. It parses the NSS key
// log lines crypto/tls writes during a TLS 1.3 handshake and keeps the two
// application traffic secrets per client random
// ("CLIENT_TRAFFIC_SECRET_0 <client random> <secret>" and
// "SERVER_TRAFFIC_SECRET_0 ..."), until Take removes them or Forget drops
// them. Other labels, malformed lines and TLS 1.2 lines are ignored. Each
// Write holds whole lines, as crypto/tls writes them. Two handshakes with
// the same client random (the client chooses it) make the entry
// ambiguous: Take then refuses it rather than hand either connection the
// other's secrets.
//
// It is bounded: an entry older than maxAge, or the oldest beyond
// maxEntries, is dropped, so handshakes that never reach a takeover cannot
// grow it. It is safe for concurrent use and never logs or prints a secret.
type KeyLog struct {
	mu         sync.Mutex
	entries    map[[32]byte]*keyLogEntry
	order      []keyLogRef // insertion order, oldest first; may hold refs to entries already gone
	maxAge     time.Duration
	maxEntries int
	now        func() time.Time
}

type keyLogEntry struct {
	client, server []byte
	added          time.Time
	// conflict: a secret came twice for this random. A client chooses its
	// random, so two handshakes can share one; their secrets are then
	// never handed out, and both connections stay with crypto/tls.
	conflict bool
}

type keyLogRef struct {
	random [32]byte
	entry  *keyLogEntry
}

// NewKeyLog returns a KeyLog keeping at most maxEntries entries, none older
// than maxAge by now (time.Now when nil).
func NewKeyLog(maxAge time.Duration, maxEntries int, now func() time.Time) *KeyLog {
	if now == nil {
		now = time.Now
	}
	return &KeyLog{entries: map[[32]byte]*keyLogEntry{}, maxAge: maxAge, maxEntries: max(maxEntries, 1), now: now}
}

// Write takes one or more key log lines. It never fails: an error from a
// KeyLogWriter fails the handshake in crypto/tls.
func (k *KeyLog) Write(line []byte) (int, error) {
	n := len(line)
	for len(line) > 0 {
		var l []byte
		l, line, _ = bytes.Cut(line, []byte{'\n'})
		k.add(l)
	}
	return n, nil
}

func (k *KeyLog) add(line []byte) {
	label, rest, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte{' '})
	if !ok {
		return
	}
	isClient := string(label) == "CLIENT_TRAFFIC_SECRET_0"
	if !isClient && string(label) != "SERVER_TRAFFIC_SECRET_0" {
		return
	}
	rnd, sec, ok := bytes.Cut(rest, []byte{' '})
	var random [32]byte
	if !ok || len(rnd) != 64 || len(sec) != 64 && len(sec) != 96 {
		return
	}
	if _, err := hex.Decode(random[:], rnd); err != nil {
		return
	}
	secret := make([]byte, len(sec)/2)
	if _, err := hex.Decode(secret, sec); err != nil {
		return
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expire(now)
	e := k.entries[random]
	if e == nil {
		e = &keyLogEntry{added: now}
		k.entries[random] = e
		k.order = append(k.order, keyLogRef{random: random, entry: e})
		k.trim()
	}
	slot := &e.server
	if isClient {
		slot = &e.client
	}
	if *slot != nil {
		e.conflict = true
		clear(secret)
		return
	}
	*slot = secret
}

// expire drops the entries older than maxAge from the front of the order.
func (k *KeyLog) expire(now time.Time) {
	i := 0
	for ; i < len(k.order); i++ {
		r := k.order[i]
		if now.Sub(r.entry.added) <= k.maxAge {
			break
		}
		k.drop(r)
	}
	k.order = k.order[i:]
}

// trim keeps at most maxEntries entries and compacts the order when refs to
// taken entries outnumber the live ones.
func (k *KeyLog) trim() {
	for len(k.entries) > k.maxEntries {
		k.drop(k.order[0])
		k.order = k.order[1:]
	}
	k.compact()
}

// compact drops the refs to entries already taken or forgotten once they
// outnumber the live ones: a ref holds its entry, so without this every
// connection that took its secrets would leave about 200 bytes behind
// until maxEntries more handshakes came.
func (k *KeyLog) compact() {
	if len(k.order) > 2*len(k.entries) && len(k.order) > min(64, k.maxEntries) {
		live := make([]keyLogRef, 0, len(k.entries))
		for _, r := range k.order {
			if k.entries[r.random] == r.entry {
				live = append(live, r)
			}
		}
		k.order = live
	}
}

func (k *KeyLog) drop(r keyLogRef) {
	if e := k.entries[r.random]; e == r.entry {
		clear(e.client)
		clear(e.server)
		delete(k.entries, r.random)
	}
}

// Take returns and removes the two application traffic secrets of the
// handshake with this client random; ok is false unless both were logged
// and are not expired.
func (k *KeyLog) Take(clientRandom []byte) (clientSecret, serverSecret []byte, ok bool) {
	if len(clientRandom) != 32 {
		return nil, nil, false
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expire(now)
	e := k.entries[[32]byte(clientRandom)]
	if e == nil || e.client == nil || e.server == nil {
		return nil, nil, false
	}
	delete(k.entries, [32]byte(clientRandom))
	k.compact()
	cs, ss := e.client, e.server
	e.client, e.server = nil, nil
	if e.conflict {
		clear(cs)
		clear(ss)
		return nil, nil, false
	}
	return cs, ss, true
}

// Forget drops the secrets of the handshake with this client random (the
// connection stays with crypto/tls, or is gone).
func (k *KeyLog) Forget(clientRandom []byte) {
	if len(clientRandom) != 32 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.entries[[32]byte(clientRandom)]; e != nil {
		clear(e.client)
		clear(e.server)
		e.client, e.server = nil, nil
		delete(k.entries, [32]byte(clientRandom))
		k.compact()
	}
}

// Len returns the number of entries held.
func (k *KeyLog) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}

package tls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Carrying generated ticket keys to the next process.
//
// Keys edge generates itself live only in its memory, so a new process
// (edge -upgrade) used to start with keys of its own, and every ticket a
// client held was useless: each client that reconnected after an upgrade,
// and every new tab, paid a full handshake, exactly when a fleet is being
// rolled. So the old process hands its keys on, the way it hands on its
// sockets: TicketState is what cmd/edge/internal/upgrade passes to the new process
// through an inherited pipe (never a file, never the environment), and
// TicketOptions.Carried is what the new process starts from. The keys are
// the derived ones (name, AES and HMAC keys, as they encrypt and
// authenticate tickets), with their generation and the time of the last
// rotation, so the new process keeps the old one's schedule: its next
// rotation comes when the old one's would have.
//
// Layout, big-endian:
//
//	version[1]=1 | count[1] | generation[8] | rotated_unix_nanos[8] | count × (name[16] | aes[32] | hmac[32])
//
// The first key encrypts. Keys from a key file or a source (Consul KV) are
// not carried: the new process reads them where the old one did.

const (
	ticketStateVersion = 1
	ticketStateHead    = 1 + 1 + 8 + 8
	ticketStateKey     = 16 + 32 + 32
	// MaxTicketStateBytes bounds what a new process reads of a carried
	// state: maxTicketKeys keys and the head.
	MaxTicketStateBytes = ticketStateHead + maxTicketKeys*ticketStateKey
)

// TicketState returns the session-ticket keys this Terminator generated,
// for the process that takes over from it (TicketOptions.Carried), or nil
// when there are none to carry: tickets off, or keys from a key file or a
// source. The caller must clear it once passed on.
func (t *Terminator) TicketState() []byte {
	if t.tickets == nil || t.tickets.keys.source != nil {
		return nil
	}
	return t.tickets.keys.state()
}

func (k *ticketKeys) state() []byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	b := make([]byte, 0, ticketStateHead+len(k.keys)*ticketStateKey)
	b = append(b, ticketStateVersion, byte(len(k.keys)))
	b = binary.BigEndian.AppendUint64(b, k.gen)
	b = binary.BigEndian.AppendUint64(b, uint64(k.rotated.UnixNano()))
	for _, key := range k.keys {
		b = append(b, key.name[:]...)
		b = append(b, key.aes[:]...)
		b = append(b, key.mac[:]...)
	}
	return b
}

// errTicketState reports a carried state that is no TicketState.
var errTicketState = errors.New("carried ticket keys")

// parseTicketState reads what state wrote. It clears nothing: the caller
// owns b.
func parseTicketState(b []byte) (keys []*ticketKey, gen uint64, rotated time.Time, err error) {
	if len(b) < ticketStateHead || len(b) > MaxTicketStateBytes {
		return nil, 0, time.Time{}, fmt.Errorf("%w: %d bytes", errTicketState, len(b))
	}
	n := int(b[1])
	switch {
	case b[0] != ticketStateVersion:
		return nil, 0, time.Time{}, fmt.Errorf("%w: version %d", errTicketState, b[0])
	case n == 0 || n > maxTicketKeys || len(b) != ticketStateHead+n*ticketStateKey:
		return nil, 0, time.Time{}, fmt.Errorf("%w: %d keys in %d bytes", errTicketState, n, len(b))
	}
	gen = binary.BigEndian.Uint64(b[2:])
	rotated = time.Unix(0, int64(binary.BigEndian.Uint64(b[10:])))
	for i, p := 0, b[ticketStateHead:]; len(p) > 0; i, p = i+1, p[ticketStateKey:] {
		k := &ticketKey{gen: gen - min(gen, uint64(i))}
		copy(k.name[:], p[:16])
		copy(k.aes[:], p[16:48])
		copy(k.mac[:], p[48:80])
		if k.macIn, err = padState(k.mac[:], 0x36); err == nil {
			k.macOut, err = padState(k.mac[:], 0x5c)
		}
		if err != nil {
			return nil, 0, time.Time{}, err
		}
		keys = append(keys, k)
	}
	return keys, gen, rotated, nil
}

// restore installs carried keys (generated keys only), keeping at most
// Keep of them.
func (k *ticketKeys) restore(b []byte) error {
	keys, gen, rotated, err := parseTicketState(b)
	if err != nil {
		return err
	}
	for _, old := range keys[min(len(keys), k.keep):] {
		old.zero()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys, k.gen, k.rotated = keys[:min(len(keys), k.keep)], gen, rotated
	return nil
}

// firstRotation is how long after now the first rotation of carried keys
// comes: when the process they came from would have rotated them (at
// once when that moment has passed), so an upgrade neither shortens nor
// stretches a key's time as the one that encrypts.
func (k *ticketKeys) firstRotation(every time.Duration) time.Duration {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return max(k.rotated.Add(every).Sub(k.now()), 0)
}

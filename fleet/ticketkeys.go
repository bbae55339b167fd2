package fleet

import (
	"bytes"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// TicketKeys keeps a fleet's TLS session-ticket keys in one Consul KV entry,
// so a client resumes on whichever edge its next connection lands
// (traefik PR #10284, gorouter#190, envoy#7397) without keys copied by hand.
//
// The value has the key-file format: one base64 key per line, the first one
// encrypting, all accepted. The second line is the next key, staged: every
// edge accepts it a whole rotation period before any edge encrypts with
// it, so a rotation never produces tickets that another edge cannot read
// yet. The entry's Flags hold the Unix time of the last rotation.
//
// Any edge may rotate: whichever reads the entry first once RotateEvery
// has passed writes the rotated value with a check-and-set on the index it
// read. Only one write wins; the others read the winner's value. No lock
// or leader is needed, and an edge that cannot reach Consul keeps the keys
// it has.
type TicketKeys struct {
	c           *api.Client
	kv          *api.KV
	key         string
	maxBytes    int
	rotateEvery time.Duration
	keep        int
	keyBytes    int
	validate    func([]byte) error
	parse       func([]byte) ([][]byte, error)
	seal        cipher.AEAD // nil: the entry in the clear
	now         func() time.Time
}

// TicketKeysOptions configure a TicketKeys.
type TicketKeysOptions struct {
	// Key is the KV path, e.g. "edge/ticket-keys".
	Key string
	// RotateEvery is how long a key encrypts; default 1h.
	RotateEvery time.Duration
	// Keep is how many keys, the encrypting one included, are accepted
	// besides the staged next one; default 3.
	Keep int
	// Validate checks a value before a rotation rewrites it; an entry that
	// fails is reported and never overwritten. Nil accepts any lines. A
	// value that is not due is returned unchecked: the caller parses it.
	Validate func([]byte) error
	// Parse turns a value into keys, for TicketKeys (edgetls's
	// ParseTicketKeys: fleet keeps the entry, edgetls owns its
	// format). With Parse and no Validate, a value is valid when Parse
	// accepts it.
	Parse func([]byte) ([][]byte, error)
	// KeyBytes is the length of the keys generated; default 80 (the longer
	// of the two ticket-key lengths). CookieKeys uses 32.
	KeyBytes int
	// MaxBytes bounds the entry: a longer value is refused by its answer's
	// bound, before any of it is decoded (the keys in use stay); default
	// MaxTicketKeysBytes. The client must be made by NewClient.
	MaxBytes int
	// SealKey, when set (32 bytes), seals the entry (sealedentry.go): a
	// reader of the entry without it learns nothing of the keys, a writer
	// without it cannot make one edge take keys of theirs. An entry that
	// does not open with it (sealed with another key, or changed) is
	// refused and never overwritten; one written in the clear is refused
	// and, once due, replaced by fresh keys, sealed.
	SealKey []byte
	// Now defaults to time.Now.
	Now func() time.Time
}

// NewTicketKeys returns a TicketKeys on c.
func NewTicketKeys(c *api.Client, o TicketKeysOptions) *TicketKeys {
	t := &TicketKeys{c: c, kv: c.KV(), key: o.Key, maxBytes: o.MaxBytes, rotateEvery: o.RotateEvery, keep: o.Keep, keyBytes: o.KeyBytes, validate: o.Validate, parse: o.Parse, now: o.Now}
	if t.maxBytes <= 0 {
		t.maxBytes = MaxTicketKeysBytes
	}
	if len(o.SealKey) > 0 {
		t.seal = newSealer(o.SealKey)
	}
	if t.validate == nil && t.parse != nil {
		t.validate = func(v []byte) error {
			keys, err := t.parse(v)
			for _, k := range keys {
				clear(k)
			}
			return err
		}
	}
	if t.keyBytes <= 0 {
		t.keyBytes = ticketKeyBytes
	}
	if t.rotateEvery <= 0 {
		t.rotateEvery = time.Hour
	}
	if t.keep <= 0 {
		t.keep = 3
	}
	if t.now == nil {
		t.now = time.Now
	}
	return t
}

// MaxTicketKeysBytes bounds a ticket-key entry: a rotation writes at most
// 101 keys of 80 bytes (conf's largest keep), about 11 KiB in base64
// lines; the rest is room for an operator's comments.
const MaxTicketKeysBytes = 64 << 10

// ticketKeyBytes is the length of the keys TicketKeys generates (the longer
// of the two key-file lengths).
const ticketKeyBytes = 80

// Fetch returns the current value, creating the entry or rotating it when
// due. The caller owns the returned bytes (and should clear them).
func (t *TicketKeys) Fetch(ctx context.Context) ([]byte, error) {
	e, err := t.fetch(ctx)
	return e.value, err
}

// TicketKeys is the current keys (Fetch, then Parse), the newest first:
// with Parse set, a TicketKeys is an edgetls.TicketKeySource. The caller
// owns the keys (and should clear them).
func (t *TicketKeys) TicketKeys(ctx context.Context) ([][]byte, error) {
	if t.parse == nil {
		return nil, fmt.Errorf("ticket keys in consul kv %q: no parser", t.key)
	}
	v, err := t.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	defer clear(v)
	keys, err := t.parse(v)
	if err != nil {
		return nil, &RefusedEntryError{Key: t.key, Why: RefusedMalformed, Err: err}
	}
	return keys, nil
}

// keyEntry is the entry as Fetch left it: its value, the index to block
// on for the next change, and when the next rotation is due.
type keyEntry struct {
	value []byte
	index uint64
	due   time.Time
}

func (t *TicketKeys) fetch(ctx context.Context) (keyEntry, error) {
	w := (&api.WriteOptions{}).WithContext(ctx)
	// Losing a check-and-set means another edge rotated meanwhile: its
	// value is read on the next turn. Three turns cover any sane fleet;
	// more conflicts than that are reported, and the keys in use stay.
	for range 3 {
		pair, meta, replace, err := t.read(ctx)
		if err != nil {
			return keyEntry{}, err
		}
		var lines []string
		var index uint64
		if replace {
			index = pair.ModifyIndex
		} else if pair != nil {
			lines, index = keyLines(pair.Value), pair.ModifyIndex
			stamp := time.Unix(int64(pair.Flags), 0)
			if len(lines) >= 2 && t.now().Sub(stamp) < t.rotateEvery {
				// Not due: the caller parses the value anyway, so it is
				// checked there, once.
				return keyEntry{value: pair.Value, index: meta.LastIndex, due: stamp.Add(t.rotateEvery)}, nil
			}
			if t.validate != nil {
				if err := t.validate(pair.Value); err != nil {
					return keyEntry{}, &RefusedEntryError{Key: t.key, Why: RefusedMalformed, Err: err}
				}
			}
			clear(pair.Value)
		}
		next, err := t.rotate(lines)
		if err != nil {
			return keyEntry{}, err
		}
		stamp := t.now()
		flags := uint64(stamp.Unix())
		stored := next
		if t.seal != nil {
			stored = sealEntry(t.seal, t.key, flags, next)
		}
		ok, _, err := t.kv.CAS(&api.KVPair{Key: t.key, Value: stored, Flags: flags, ModifyIndex: index}, w)
		if err != nil {
			return keyEntry{}, fmt.Errorf("ticket keys in consul kv %q: write: %w", t.key, err)
		}
		if ok {
			// A watcher blocking from the index read returns at once with
			// the entry as written: one extra read per rotation.
			return keyEntry{value: next, index: index, due: time.Unix(stamp.Unix(), 0).Add(t.rotateEvery)}, nil
		}
		clear(next)
	}
	return keyEntry{}, fmt.Errorf("ticket keys in consul kv %q: the entry kept changing while rotating", t.key)
}

// read returns the entry, opened when it is sealed; nil when there is
// none. An entry over its bound, or one that does not open, is a
// *RefusedEntryError and is never overwritten, except an entry in the
// clear once it is due: its keys are not used (anyone who can write the
// entry could have put them there), and the rotation replaces them with
// fresh ones, sealed, as if the entry were missing. That is how a fleet
// that gained a seal key moves off the entry its older edges wrote.
func (t *TicketKeys) read(ctx context.Context) (pair *api.KVPair, meta *api.QueryMeta, replace bool, err error) {
	pair, meta, err = consul.GetBounded(ctx, t.c, t.key, t.maxBytes, api.QueryOptions{})
	if errors.Is(err, consul.ErrResponseTooLarge) {
		return nil, nil, false, &RefusedEntryError{Key: t.key, Why: RefusedOversized, Err: err}
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("ticket keys: %w", err)
	}
	if pair == nil || t.seal == nil {
		return pair, meta, false, nil
	}
	plain, err := openEntry(t.seal, t.key, pair.Flags, pair.Value, t.maxBytes)
	if errors.Is(err, errUnsealed) && t.now().Sub(time.Unix(int64(pair.Flags), 0)) >= t.rotateEvery {
		pair.Value = nil
		return pair, meta, true, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	pair.Value = plain
	return pair, meta, false, nil
}

// rotate returns the value after one rotation of lines: the staged key
// starts encrypting, a fresh key is staged, the old encrypting key and its
// predecessors stay accepted up to keep. An entry with one key gets a
// staged one and keeps its encrypting key, so no edge meets a key it has
// not seen.
func (t *TicketKeys) rotate(lines []string) ([]byte, error) {
	fresh := func() (string, error) {
		b := make([]byte, t.keyBytes)
		defer clear(b)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("ticket keys: random key: %w", err)
		}
		return base64.StdEncoding.EncodeToString(b), nil
	}
	var out []string
	switch len(lines) {
	case 0:
		for range 2 {
			k, err := fresh()
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
	case 1:
		k, err := fresh()
		if err != nil {
			return nil, err
		}
		out = []string{lines[0], k}
	default:
		k, err := fresh()
		if err != nil {
			return nil, err
		}
		out = append([]string{lines[1], k, lines[0]}, lines[2:]...)
	}
	if limit := t.keep + 1; len(out) > limit {
		out = out[:limit]
	}
	return []byte(strings.Join(out, "\n") + "\n"), nil
}

// keyLines returns the key lines of a key-file value: blank lines and
// comments are dropped, since a rotation rewrites the entry anyway.
func keyLines(v []byte) []string {
	var out []string
	for line := range bytes.Lines(v) {
		s := strings.TrimSpace(string(line))
		if s != "" && s[0] != '#' {
			out = append(out, s)
		}
	}
	return out
}

package tls

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// TicketKeySource supplies session-ticket keys kept outside the process, so
// that every node of a fleet resumes the sessions of the others (a ticket
// issued by one node is otherwise useless on the next: traefik#10284,
// envoy#7397). Run polls it every ReloadInterval; a new answer replaces the
// keys, an error keeps the previous ones.
type TicketKeySource interface {
	// TicketKeys returns the raw keys, 48 or 80 bytes each, the first one
	// encrypting new tickets and every one accepted. The Terminator derives
	// its own keys from them and clears the returned slices.
	TicketKeys(ctx context.Context) ([][]byte, error)
}

// TicketKeyFile returns a TicketKeySource reading path in the format
// documented in doc.go: one base64 key of 48 or 80 bytes per line, the first
// one encrypting, blank lines and lines starting with '#' ignored.
func TicketKeyFile(path string) TicketKeySource { return ticketKeyFile{path: path} }

type ticketKeyFile struct{ path string }

func (f ticketKeyFile) TicketKeys(context.Context) ([][]byte, error) {
	data, err := readSecretFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("ticket key file %s: %w", f.path, err)
	}
	defer clear(data)
	keys, err := parseTicketKeys(data)
	if err != nil {
		return nil, fmt.Errorf("ticket key file %s: %w", f.path, err)
	}
	return keys, nil
}

// maxTicketKeys bounds a key file; more keys only slow down lookups.
const maxTicketKeys = 64

// ParseTicketKeys parses a key-file value (see doc.go), for sources that
// fetch it from elsewhere (Consul KV, say). The caller owns the keys and
// should clear them.
func ParseTicketKeys(data []byte) ([][]byte, error) { return parseTicketKeys(data) }

// parseTicketKeys parses the key file format: base64 (standard alphabet)
// lines of 48 or 80 bytes, as HAProxy's tls-ticket-keys, so the same
// generator (`openssl rand -base64 80`) and distribution tooling serve both.
func parseTicketKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		key := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
		n, err := base64.StdEncoding.Decode(key, text)
		if err != nil {
			clearAll(keys)
			return nil, fmt.Errorf("line %d: not base64: %w", line, err)
		}
		key = key[:n]
		if n != 48 && n != 80 {
			clearAll(keys)
			return nil, fmt.Errorf("line %d: key is %d bytes, want 48 or 80", line, n)
		}
		if len(keys) == maxTicketKeys {
			clearAll(keys)
			return nil, fmt.Errorf("line %d: more than %d keys", line, maxTicketKeys)
		}
		keys = append(keys, key)
	}
	if err := sc.Err(); err != nil {
		clearAll(keys)
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return keys, nil
}

func clearAll(keys [][]byte) {
	for _, k := range keys {
		clear(k)
	}
}

// ticketKey is one key in use. Name travels in clear in every ticket (as in
// RFC 5077 section 4, "key_name") and picks the key on the way back; the AES
// and HMAC keys are derived from the whole raw key with HKDF so that 48- and
// 80-byte keys are handled alike.
type ticketKey struct {
	name [16]byte
	aes  [32]byte
	mac  [32]byte
	gen  uint64
	// macIn and macOut are SHA-256's state after the HMAC key's inner and
	// outer pads (RFC 2104 section 4: a key's intermediate results may be
	// computed once): every ticket then hashes only its own blocks, two
	// compressions and hmac.New's allocations fewer. Zeroed with the key.
	macIn, macOut []byte
}

func newTicketKey(raw []byte, gen uint64) (*ticketKey, error) {
	if len(raw) != 48 && len(raw) != 80 {
		return nil, fmt.Errorf("ticket key is %d bytes, want 48 or 80", len(raw))
	}
	k := &ticketKey{gen: gen}
	copy(k.name[:], raw[:16])
	a, err := hkdf.Key(sha256.New, raw, nil, "edge session ticket aes", 32)
	if err != nil {
		return nil, err
	}
	m, err := hkdf.Key(sha256.New, raw, nil, "edge session ticket hmac", 32)
	if err != nil {
		return nil, err
	}
	copy(k.aes[:], a)
	copy(k.mac[:], m)
	clear(a)
	clear(m)
	if k.macIn, err = padState(k.mac[:], 0x36); err != nil {
		return nil, err
	}
	if k.macOut, err = padState(k.mac[:], 0x5c); err != nil {
		return nil, err
	}
	return k, nil
}

// padState is SHA-256's state after one block of key XOR pad.
func padState(key []byte, pad byte) ([]byte, error) {
	var b [sha256.BlockSize]byte
	defer clear(b[:])
	copy(b[:], key)
	for i := range b {
		b[i] ^= pad
	}
	h := sha256.New()
	h.Write(b[:])
	return h.(encoding.BinaryMarshaler).MarshalBinary()
}

// sum appends HMAC-SHA256(k.mac, msg) to dst, from the pads' states.
func (k *ticketKey) sum(dst, msg []byte) []byte {
	h := sha256.New()
	u := h.(encoding.BinaryUnmarshaler)
	if u.UnmarshalBinary(k.macIn) != nil {
		panic("tls: bad HMAC pad state") // written by padState, never changed
	}
	h.Write(msg)
	var inner [sha256.Size]byte
	h.Sum(inner[:0])
	if u.UnmarshalBinary(k.macOut) != nil {
		panic("tls: bad HMAC pad state")
	}
	h.Write(inner[:])
	return h.Sum(dst)
}

func (k *ticketKey) zero() {
	clear(k.name[:])
	clear(k.aes[:])
	clear(k.mac[:])
	clear(k.macIn)
	clear(k.macOut)
}

func (k *ticketKey) equal(o *ticketKey) bool {
	return subtle.ConstantTimeCompare(k.name[:], o.name[:])&
		subtle.ConstantTimeCompare(k.aes[:], o.aes[:])&
		subtle.ConstantTimeCompare(k.mac[:], o.mac[:]) == 1
}

// Ticket layout (RFC 5077 section 4's recommended construction):
//
//	key_name[16] | iv[16] | AES-256-CTR(issued_unix[8] | session state) | HMAC-SHA256[32]
//
// The HMAC covers everything before it. issued_unix lets unwrap enforce the
// exact age bound whatever the key source.
const (
	ticketNameLen = 16
	ticketIVLen   = aes.BlockSize
	ticketTimeLen = 8
	ticketMACLen  = sha256.Size
	ticketMinLen  = ticketNameLen + ticketIVLen + ticketTimeLen + ticketMACLen
)

// ticketKeys holds the keys and implements tls.Config.WrapSession and
// UnwrapSession. Readers hold the read lock while they use a key, so a
// retired key can be cleared under the write lock with nobody using it.
type ticketKeys struct {
	now    func() time.Time
	keep   int
	every  time.Duration
	maxAge time.Duration
	source TicketKeySource // nil: keys generated here
	kind   string

	mu      sync.RWMutex
	keys    []*ticketKey // keys[0] encrypts
	gen     uint64
	rotated time.Time
	lastErr string
	refused string // why the source refused its value; "" when it did not
	// carried: the keys came from the previous process (Carried);
	// carryErr: a carried state that could not be read.
	carried  bool
	carryErr error
}

func newTicketKeys(o TicketOptions, now func() time.Time) (*ticketKeys, error) {
	k := &ticketKeys{
		now:    now,
		keep:   o.Keep,
		every:  o.RotateEvery,
		maxAge: o.ticketMaxAge(),
		source: o.Source,
		kind:   "memory",
	}
	switch {
	case o.KeyFile != "":
		k.source = TicketKeyFile(o.KeyFile)
		k.kind = "file:" + o.KeyFile
	case o.Source != nil:
		k.kind = "source"
	}
	if k.source == nil {
		if len(o.Carried) > 0 {
			if k.carryErr = k.restore(o.Carried); k.carryErr == nil {
				k.carried = true
				return k, nil
			}
		}
		if _, err := k.rotate(); err != nil {
			return nil, err
		}
		return k, nil
	}
	if _, err := k.load(context.Background()); err != nil {
		if o.Source == nil {
			// A key file that does not load is the operator's mistake:
			// say so before serving anything.
			return nil, err
		}
		// A source elsewhere (Consul KV) may be down when edge starts; a
		// fresh edge must start all the same (traefik#1689). It serves
		// with a key of its own, so resumption works on this edge, and
		// takes the source's keys at the first poll that succeeds.
		if _, rerr := k.rotate(); rerr != nil {
			return nil, rerr
		}
		k.mu.Lock()
		k.failed(err)
		k.mu.Unlock()
	}
	return k, nil
}

// rotate puts a fresh random key first and retires (and clears) keys beyond
// Keep.
func (k *ticketKeys) rotate() (uint64, error) {
	var raw [80]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return 0, fmt.Errorf("ticket key: %w", err)
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	key, err := newTicketKey(raw[:], k.gen+1)
	clear(raw[:])
	if err != nil {
		return 0, err
	}
	k.gen++
	keys := make([]*ticketKey, 0, k.keep)
	keys = append(keys, key)
	for i, old := range k.keys {
		if len(keys) < k.keep {
			keys = append(keys, old)
			continue
		}
		k.keys[i].zero()
	}
	k.keys = keys
	k.rotated = now
	return k.gen, nil
}

// entryRefusal is an error of a source that read its value and refused it
// (fleet.RefusedEntryError: a Consul entry that does not open, is in
// the clear or is oversized), as opposed to a source it could not reach.
type entryRefusal interface {
	error
	RefusedWhy() string
}

// failed records a failed load; k.mu must be held.
func (k *ticketKeys) failed(err error) {
	k.lastErr, k.refused = err.Error(), ""
	if r, ok := errors.AsType[entryRefusal](err); ok {
		k.refused = r.RefusedWhy()
	}
}

// load asks the source for keys and installs them when they differ from the
// current ones; changed reports whether they did.
func (k *ticketKeys) load(ctx context.Context) (changed bool, err error) {
	raw, err := k.source.TicketKeys(ctx)
	defer clearAll(raw)
	if err == nil && len(raw) == 0 {
		err = errors.New("ticket key source returned no keys")
	}
	now := k.now()
	var keys []*ticketKey
	for i, r := range raw {
		if err != nil {
			break
		}
		var key *ticketKey
		key, err = newTicketKey(r, k.gen+1)
		if err != nil {
			err = fmt.Errorf("key %d: %w", i+1, err)
		}
		keys = append(keys, key)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		for _, key := range keys {
			if key != nil {
				key.zero()
			}
		}
		k.failed(err)
		return false, err
	}
	k.lastErr, k.refused = "", ""
	if len(keys) == len(k.keys) {
		same := true
		for i := range keys {
			same = same && keys[i].equal(k.keys[i])
		}
		if same {
			for _, key := range keys {
				key.zero()
			}
			return false, nil
		}
	}
	for _, old := range k.keys {
		old.zero()
	}
	k.gen++
	k.keys = keys
	k.rotated = now
	return true, nil
}

// wrap implements tls.Config.WrapSession.
func (k *ticketKeys) wrap(_ tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	state, err := ss.Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]byte, ticketMinLen+len(state))
	iv := out[ticketNameLen : ticketNameLen+ticketIVLen]
	if _, err := rand.Read(iv); err != nil {
		return nil, err
	}
	body := out[ticketNameLen+ticketIVLen : len(out)-ticketMACLen]
	binary.BigEndian.PutUint64(body, uint64(k.now().Unix()))
	copy(body[ticketTimeLen:], state)
	clear(state)

	k.mu.RLock()
	defer k.mu.RUnlock()
	if len(k.keys) == 0 {
		return nil, errors.New("no session ticket key")
	}
	key := k.keys[0]
	copy(out, key.name[:])
	block, err := aes.NewCipher(key.aes[:])
	if err != nil {
		return nil, err
	}
	cipher.NewCTR(block, iv).XORKeyStream(body, body)
	key.sum(out[:len(out)-ticketMACLen], out[:len(out)-ticketMACLen])
	return out, nil
}

// unwrap implements tls.Config.UnwrapSession. Every unusable ticket yields
// (nil, nil), a full handshake: an error would abort the connection.
func (k *ticketKeys) unwrap(ticket []byte, _ tls.ConnectionState) (*tls.SessionState, error) {
	if len(ticket) < ticketMinLen {
		return nil, nil
	}
	plain := k.open(ticket)
	if plain == nil {
		return nil, nil
	}
	// plain is not cleared: ParseSessionState keeps slices of it (the
	// session secret) in the returned state.
	issued := time.Unix(int64(binary.BigEndian.Uint64(plain)), 0)
	age := k.now().Sub(issued)
	// A ticket from the future beyond clock skew is forged or from a node
	// with a broken clock.
	if age > k.maxAge || age < -5*time.Minute {
		return nil, nil
	}
	ss, err := tls.ParseSessionState(plain[ticketTimeLen:])
	if err != nil {
		return nil, nil
	}
	return ss, nil
}

func (k *ticketKeys) open(ticket []byte) []byte {
	name := ticket[:ticketNameLen]
	iv := ticket[ticketNameLen : ticketNameLen+ticketIVLen]
	body := ticket[ticketNameLen+ticketIVLen : len(ticket)-ticketMACLen]
	tag := ticket[len(ticket)-ticketMACLen:]

	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, key := range k.keys {
		if !bytes.Equal(key.name[:], name) {
			continue
		}
		var mac [sha256.Size]byte
		if !hmac.Equal(key.sum(mac[:0], ticket[:len(ticket)-ticketMACLen]), tag) {
			return nil
		}
		block, err := aes.NewCipher(key.aes[:])
		if err != nil {
			return nil
		}
		plain := make([]byte, len(body))
		cipher.NewCTR(block, iv).XORKeyStream(plain, body)
		return plain
	}
	return nil
}

func (k *ticketKeys) status() TicketStatus {
	k.mu.RLock()
	defer k.mu.RUnlock()
	s := TicketStatus{
		Enabled:    true,
		Source:     k.kind,
		Generation: k.gen,
		Keys:       len(k.keys),
		LastChange: k.rotated,
		MaxAge:     k.maxAge.String(),
		LastError:  k.lastErr,
		Refused:    k.refused,
	}
	for _, key := range k.keys {
		s.KeyGenerations = append(s.KeyGenerations, key.gen)
	}
	if k.source == nil {
		s.NextRotation = k.rotated.Add(k.every)
	}
	return s
}

// ticketRotation is the background side of the ticket keys: it rotates
// generated keys or polls the key source, logs and reports the changes.
type ticketRotation struct {
	keys *ticketKeys
	log  *slog.Logger
	obs  Observer

	mu     sync.Mutex // serialises polls and guards errLog
	errLog string     // last source error logged
}

// rotate starts a new ticket key (generated keys only).
func (r *ticketRotation) rotate() error {
	gen, err := r.keys.rotate()
	if err != nil {
		r.log.Error("session ticket key rotation failed", "err", err)
		return err
	}
	r.log.Info("session ticket keys rotated", "generation", gen)
	r.obs.TicketKeysRotated()
	return nil
}

// poll asks the key source for keys, logging a failure once per distinct
// error.
func (r *ticketRotation) poll(ctx context.Context) error {
	changed, err := r.keys.load(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && err.Error() != r.errLog {
			r.log.Error("session ticket keys not reloaded, previous keys stay", "source", r.keys.kind, "err", err)
			r.errLog = err.Error()
		}
		return err
	}
	r.errLog = ""
	if changed {
		r.log.Info("session ticket keys reloaded", "source", r.keys.kind)
		r.obs.TicketKeysRotated()
	}
	return nil
}

// loop returns the background loop of the keys: rotation every RotateEvery
// for generated keys, else polling the source every interval (none when
// polling is off).
func (r *ticketRotation) loop(o TicketOptions, interval time.Duration) (name string, loop func(context.Context)) {
	if r.keys.source == nil {
		return "ticket rotation", func(ctx context.Context) {
			// Carried keys keep their schedule (firstRotation); fresh
			// ones were rotated just now and wait RotateEvery.
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.keys.firstRotation(o.RotateEvery)):
				_ = r.rotate()
			}
			every(ctx, o.RotateEvery, func() { _ = r.rotate() })
		}
	}
	if interval <= 0 {
		return "", nil
	}
	return "ticket keys", func(ctx context.Context) {
		every(ctx, interval, func() { _ = r.poll(ctx) })
	}
}

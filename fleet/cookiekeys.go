package fleet

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// CookieKeyTarget is what CookieKeys feeds: *balance.Pool.
type CookieKeyTarget interface {
	SetCookieKeys(keys [][]byte) error
}

var _ CookieKeyTarget = (*balance.Pool)(nil)

// Bounds of a cookie-key entry: whoever can write the fleet prefix must
// not make an edge hold or hash without bound.
const (
	// MaxCookieKeys is the most keys an entry may hold (current, staged
	// and previous ones together).
	MaxCookieKeys = 16
	// MaxCookieKeyBytes is the longest key accepted.
	MaxCookieKeyBytes = 256
	// maxCookieEntryBytes bounds the whole value before it is parsed.
	maxCookieEntryBytes = 8 << 10
	// cookieKeyBytes is the length of the keys CookieKeys generates.
	cookieKeyBytes = 32
)

// ParseCookieKeys parses a cookie-key entry: one base64 (standard alphabet)
// key per line, blank lines and lines starting with '#' ignored, the first
// one signing, the second the next one (staged), the rest previous ones;
// all are accepted. Each key is MinCookieKeyLen to MaxCookieKeyBytes bytes,
// at most MaxCookieKeys of them, in a value of at most 8 KiB. The caller
// owns the keys and should clear them.
func ParseCookieKeys(v []byte) ([][]byte, error) {
	if len(v) > maxCookieEntryBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", len(v), maxCookieEntryBytes)
	}
	var keys [][]byte
	fail := func(err error) ([][]byte, error) {
		for _, k := range keys {
			clear(k)
		}
		return nil, err
	}
	line := 0
	for l := range bytes.Lines(v) {
		line++
		l = bytes.TrimSpace(l)
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		if len(keys) == MaxCookieKeys {
			return fail(fmt.Errorf("line %d: more than %d keys", line, MaxCookieKeys))
		}
		if base64.StdEncoding.DecodedLen(len(l)) > MaxCookieKeyBytes+2 {
			return fail(fmt.Errorf("line %d: key longer than %d bytes", line, MaxCookieKeyBytes))
		}
		k := make([]byte, base64.StdEncoding.DecodedLen(len(l)))
		n, err := base64.StdEncoding.Decode(k, l)
		if err != nil {
			clear(k)
			return fail(fmt.Errorf("line %d: not base64: %w", line, err))
		}
		k = k[:n]
		if n < balance.MinCookieKeyLen || n > MaxCookieKeyBytes {
			clear(k)
			return fail(fmt.Errorf("line %d: key is %d bytes, want %d to %d", line, n, balance.MinCookieKeyLen, MaxCookieKeyBytes))
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return keys, nil
}

// CookieKeysOptions configure a CookieKeys.
type CookieKeysOptions struct {
	// Pool names the pool, for logs and status.
	Pool string
	// Key is the KV path, e.g. "edge/cookie-keys/chat". Required.
	Key string
	// RotateEvery is how long a key signs; default DefaultCookieRotateEvery.
	RotateEvery time.Duration
	// Keep is how many keys, the signing one included, are accepted besides
	// the staged next one; default DefaultCookieKeep. A cookie stays
	// honoured for about Keep × RotateEvery after it was last issued.
	Keep int
	// Target receives every new set of keys. Required.
	Target CookieKeyTarget
	// WaitTime is the blocking-query wait; default DefaultWaitTime.
	WaitTime time.Duration
	// MinBackoff and MaxBackoff bound the retry delay after errors.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	Now                    func() time.Time
}

// Defaults for CookieKeysOptions.
const (
	DefaultCookieRotateEvery = 24 * time.Hour
	DefaultCookieKeep        = 7
)

// CookieKeys keeps a pool's sticky-cookie signing keys in one Consul KV
// entry, shared by every edge of the fleet: a cookie one edge issues is
// honoured by every other, with no secret file copied around. The entry is
// made and rotated exactly like TicketKeys' (a staged next key accepted a
// whole period before it signs, previous keys still accepted, any edge
// rotates with a check-and-set once due), with 32-byte keys. Run follows
// the entry with blocking queries, so a rotation reaches every edge at
// once; Consul down, the keys in use stay.
type CookieKeys struct {
	opts CookieKeysOptions
	tk   *TicketKeys

	mu      sync.Mutex
	current [][]byte // guarded by mu; the keys last given to Target
	status  CookieKeysStatus
}

// CookieKeysStatus is a point-in-time view for /status. It never holds a
// key.
type CookieKeysStatus struct {
	Pool      string    `json:"pool"`
	Key       string    `json:"consul_key"`
	Keys      int       `json:"keys"`
	Loaded    time.Time `json:"loaded,omitzero"`
	NextDue   time.Time `json:"next_rotation,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// NewCookieKeys returns a CookieKeys on c.
func NewCookieKeys(c *api.Client, o CookieKeysOptions) (*CookieKeys, error) {
	switch {
	case o.Key == "":
		return nil, fmt.Errorf("fleet: cookie keys of pool %q: key is required", o.Pool)
	case o.Target == nil:
		return nil, fmt.Errorf("fleet: cookie keys of pool %q: target is required", o.Pool)
	}
	consul.Or(&o.RotateEvery, DefaultCookieRotateEvery)
	consul.Or(&o.Keep, DefaultCookieKeep)
	if o.Keep+1 > MaxCookieKeys {
		return nil, fmt.Errorf("fleet: cookie keys of pool %q: keep %d: at most %d", o.Pool, o.Keep, MaxCookieKeys-1)
	}
	consul.Follow(&o.WaitTime, &o.MinBackoff, &o.MaxBackoff, &o.Logger, &o.Now)
	k := &CookieKeys{opts: o, status: CookieKeysStatus{Pool: o.Pool, Key: o.Key}}
	k.tk = NewTicketKeys(c, TicketKeysOptions{
		Key: o.Key, RotateEvery: o.RotateEvery, Keep: o.Keep, KeyBytes: cookieKeyBytes, Now: o.Now, MaxBytes: maxCookieEntryBytes,
		Validate: func(v []byte) error {
			keys, err := ParseCookieKeys(v)
			for _, k := range keys {
				clear(k)
			}
			return err
		},
	})
	return k, nil
}

// Load fetches the entry once (creating or rotating it when due) and gives
// its keys to Target, for a start that should sign with the fleet's keys
// from the first connection. It returns the entry's index and when its next
// rotation is due.
func (k *CookieKeys) Load(ctx context.Context) error {
	_, err := k.load(ctx)
	return err
}

func (k *CookieKeys) load(ctx context.Context) (keyEntry, error) {
	e, err := k.tk.fetch(ctx)
	if err == nil {
		err = k.apply(e)
	}
	if err != nil {
		err = fmt.Errorf("cookie keys of pool %q: %w", k.opts.Pool, err)
		k.mu.Lock()
		k.status.LastError = err.Error()
		k.mu.Unlock()
	}
	return e, err
}

// apply parses e and gives its keys to Target when they changed.
func (k *CookieKeys) apply(e keyEntry) error {
	defer clear(e.value)
	keys, err := ParseCookieKeys(e.value)
	if err != nil {
		return fmt.Errorf("consul kv %q: %w", k.opts.Key, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.status.NextDue, k.status.LastError = e.due, ""
	if sameKeys(keys, k.current) {
		for _, x := range keys {
			clear(x)
		}
		return nil
	}
	if err := k.opts.Target.SetCookieKeys(keys); err != nil {
		return err
	}
	for _, x := range k.current {
		clear(x)
	}
	k.current = keys
	k.status.Keys, k.status.Loaded = len(keys), k.opts.Now()
	k.opts.Logger.Info("cookie keys loaded from consul", "pool", k.opts.Pool, "key", k.opts.Key, "keys", len(keys), "next_rotation", e.due)
	return nil
}

// Reapply gives the keys last loaded to Target again (a reload that
// replaced the pool); it does nothing before the first load.
func (k *CookieKeys) Reapply(t CookieKeyTarget) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.current) == 0 {
		return nil
	}
	return t.SetCookieKeys(k.current)
}

// Status returns the current status. Safe for concurrent use.
func (k *CookieKeys) Status() CookieKeysStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.status
}

// Run follows the entry until ctx ends: a blocking query wakes it when any
// edge rotates, and it wakes by itself when a rotation is due, to make it
// if no other edge did. Errors keep the keys in use and are retried with
// backoff.
func (k *CookieKeys) Run(ctx context.Context) error {
	bo := consul.NewBackoff(k.opts.MinBackoff, k.opts.MaxBackoff)
	for ctx.Err() == nil {
		e, err := k.load(ctx)
		if err == nil {
			err = k.wait(ctx, e)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			k.opts.Logger.Warn("cookie keys: consul kv; keeping the keys in use", "pool", k.opts.Pool, "err", err)
			if !consul.Sleep(ctx, bo.Next()) {
				break
			}
			continue
		}
		bo.Reset()
	}
	return nil
}

// wait blocks on the entry until it changes, WaitTime passes or its
// rotation is due.
func (k *CookieKeys) wait(ctx context.Context, e keyEntry) error {
	wait := k.opts.WaitTime
	if left := e.due.Sub(k.opts.Now()); left < wait {
		// Consul's wait has a one-second granularity floor worth keeping:
		// a due entry is rotated by the load right after.
		wait = max(left, time.Second)
	}
	qctx, cancel := context.WithTimeout(ctx, wait+wait/16+10*time.Second)
	defer cancel()
	// Bounded like the read that follows: a writer who grows the entry
	// gets it refused there, and no answer here is longer than its bound.
	_, _, err := consul.GetBounded(qctx, k.tk.c, k.opts.Key, maxCookieEntryBytes, api.QueryOptions{WaitIndex: e.index, WaitTime: wait})
	if err != nil && !errors.Is(err, consul.ErrResponseTooLarge) {
		return fmt.Errorf("cookie keys of pool %q: %w", k.opts.Pool, err)
	}
	return nil
}

// sameKeys compares two key lists in constant time per key.
func sameKeys(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if subtle.ConstantTimeCompare(a[i], b[i]) != 1 {
			return false
		}
	}
	return true
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// MaxStapleBytes bounds an OCSP response read from the store: real ones
// are a few KiB, and whoever writes the prefix must not make an edge read
// without bound.
const MaxStapleBytes = 64 << 10

// stapleLockTTL is the TTL of the session behind a staple lock: longer
// than any responder request (edgetls bounds one to its OCSP timeout, 5 s
// by default), so the lock holds while its edge asks, and lapses by itself
// soon after that edge died holding it.
const stapleLockTTL = 30 * time.Second

// Staples keeps a fleet's OCSP responses in Consul KV under
// Prefix/ocsp/<certificate id>, with the lock on asking the responder
// about a certificate at the same key plus ".lock" (a Consul lock: a
// session and an acquire), so one edge at a time asks and the others
// staple its answer. It is the edgetls.StapleShare of cmd/edge; the
// Terminator verifies every response it reads from it.
type Staples struct {
	c       *api.Client
	kv      *api.KV
	session *api.Session
	prefix  string
}

// NewStaples returns the store under prefix (e.g. "edge") on c, a client
// made by NewClient (its answers are bounded).
func NewStaples(c *api.Client, prefix string) *Staples {
	return &Staples{c: c, kv: c.KV(), session: c.Session(), prefix: strings.TrimSuffix(prefix, "/")}
}

// key returns the KV key of id, refusing ids that are not what edgetls
// makes (hex, bounded), so no id can reach another part of the prefix.
func (s *Staples) key(id string) (string, error) {
	if id == "" || len(id) > 64 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("ocsp staples: certificate id %q: want lower-case hex", id)
	}
	return s.prefix + "/ocsp/" + id, nil
}

// Staple returns the stored response of id, or nil, and the index; with
// waitIndex > 0 it blocks up to wait for a change first.
func (s *Staples) Staple(ctx context.Context, id string, waitIndex uint64, wait time.Duration) ([]byte, uint64, error) {
	key, err := s.key(id)
	if err != nil {
		return nil, 0, err
	}
	pair, meta, err := consul.GetBounded(ctx, s.c, key, MaxStapleBytes, api.QueryOptions{WaitIndex: waitIndex, WaitTime: wait})
	if idx, ok := consul.TooLargeIndex(err); ok {
		// Refused before it was decoded; its index, so a watcher blocks
		// for the next change instead of reading it again at once.
		return nil, idx, fmt.Errorf("ocsp staples: %w", err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ocsp staples: %w", err)
	}
	if pair == nil {
		return nil, meta.LastIndex, nil
	}
	return pair.Value, meta.LastIndex, nil
}

// Lock takes the lock on asking about id without waiting for it.
func (s *Staples) Lock(ctx context.Context, id string) (func(), bool, error) {
	key, err := s.key(id)
	if err != nil {
		return nil, false, err
	}
	w := (&api.WriteOptions{}).WithContext(ctx)
	sid, _, err := s.session.Create(&api.SessionEntry{
		Name: "edge ocsp " + id, TTL: stapleLockTTL.String(), Behavior: api.SessionBehaviorRelease,
		// No lock-delay: a holder that dies only delays the others' own
		// requests by their wait bound, and a released lock is free at once.
		LockDelay: time.Millisecond,
	}, w)
	if err != nil {
		return nil, false, fmt.Errorf("ocsp staples: session: %w", err)
	}
	// Cleanup must outlive ctx (a shutdown): its own short bound.
	destroy := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = s.session.Destroy(sid, (&api.WriteOptions{}).WithContext(cctx))
	}
	held, _, err := s.kv.Acquire(&api.KVPair{Key: key + ".lock", Session: sid}, w)
	if err != nil || !held {
		destroy()
		if err != nil {
			return nil, false, fmt.Errorf("ocsp staples: lock %q: %w", key+".lock", err)
		}
		return nil, false, nil
	}
	return func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _ = s.kv.Release(&api.KVPair{Key: key + ".lock", Session: sid}, (&api.WriteOptions{}).WithContext(cctx))
		destroy()
	}, true, nil
}

// Store stores raw as the response of id.
func (s *Staples) Store(ctx context.Context, id string, raw []byte) error {
	key, err := s.key(id)
	if err != nil {
		return err
	}
	if len(raw) > MaxStapleBytes {
		return errors.New("ocsp staples: response too large to share")
	}
	if _, err := s.kv.Put(&api.KVPair{Key: key, Value: raw}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("ocsp staples: consul kv %q: %w", key, err)
	}
	return nil
}

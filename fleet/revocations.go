package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/trust"
	"github.com/hashicorp/consul/api"
)

// RevocationTarget receives the fleet's revocations: edge's token
// component.
type RevocationTarget interface {
	// SetFleet replaces the revocations of fleet scope in force.
	SetFleet(rs []auth.Revocation)
}

// Bounds on what a writer of the prefix can make an edge read and hold.
const (
	// MaxRevocations is the most entries an edge follows; the rest are
	// refused (and counted in the status).
	MaxRevocations = 10000
	// MaxRevocationBytes bounds one entry's value.
	MaxRevocationBytes = 2048
	// maxRevocationKeysResponse bounds the answer listing the keys.
	maxRevocationKeysResponse = int64(MaxRevocations)*160 + 4096
)

// RevocationsOptions configure Revocations.
type RevocationsOptions struct {
	// Client reaches Consul (NewClient: every answer bounded). Required.
	Client *api.Client
	// Prefix is the fleet's KV prefix; entries live under Prefix/revoked/.
	Prefix string
	// Target receives the entries in force. Required.
	Target RevocationTarget
	// StateDir, when set, keeps the last entries read in
	// StateDir/fleet-revocations.json, applied at a start while Consul
	// does not answer: a revoked subject stays revoked across a restart.
	StateDir string
	// MaxUntil bounds how far an entry's until may be from now (default
	// 25h, a day's tokens and a margin): a later one, or a before in the
	// future, is refused, so a writer of the prefix cannot revoke every
	// token for good.
	MaxUntil               time.Duration
	WaitTime               time.Duration
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	Now                    func() time.Time
}

// Revocations keeps the fleet's token revocations in Consul KV, one entry
// per revocation under Prefix/revoked/, named by the hash of what it
// revokes (RevocationKey: the same revocation written twice is one
// entry), and follows the folder with a blocking query, so a revocation
// made through any edge reaches every edge within the round trip of a
// blocking query's answer. Each entry is read once per ModifyIndex, bounded
// (MaxRevocationBytes), validated (auth.Revocation.Validate) and checked
// against its key; an entry past its until is ignored, and deleted from
// Consul by whichever edge sees it first (a check-and-set, so a rewrite
// is not lost).
type Revocations struct {
	opts RevocationsOptions
	dir  string

	mu      sync.Mutex
	entries map[string]revEntry // by key
	status  RevocationsStatus
	saved   []byte
}

type revEntry struct {
	index uint64
	r     auth.Revocation
	ok    bool // valid; a refused entry is remembered so it is read once
}

// RevocationsStatus is a point-in-time view for /status.
type RevocationsStatus struct {
	Prefix    string    `json:"prefix"`
	Entries   int       `json:"entries"`
	Refused   int       `json:"refused"`
	Index     uint64    `json:"index"`
	LastRead  time.Time `json:"last_read,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// NewRevocations validates o and fills defaults.
func NewRevocations(o RevocationsOptions) (*Revocations, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("fleet: revocations: consul client is required")
	case strings.Trim(o.Prefix, "/") == "":
		return nil, errors.New("fleet: revocations: prefix is required")
	case o.Target == nil:
		return nil, errors.New("fleet: revocations: target is required")
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	consul.Follow(&o.WaitTime, &o.MinBackoff, &o.MaxBackoff, &o.Logger, &o.Now)
	consul.Or(&o.MaxUntil, 25*time.Hour)
	return &Revocations{opts: o, dir: o.Prefix + "/revoked/", entries: map[string]revEntry{},
		status: RevocationsStatus{Prefix: o.Prefix}}, nil
}

// RevocationKey is the KV key of r under prefix: what it revokes, hashed,
// so that the same revocation is one entry however often it is made, and
// no name in it reaches another key.
func RevocationKey(prefix string, r auth.Revocation) string {
	h := sha256.New()
	for _, f := range []string{r.Issuer, r.Subject, r.ID} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	if !r.Before.IsZero() {
		h.Write([]byte(r.Before.UTC().Format(time.RFC3339Nano)))
	}
	return strings.Trim(prefix, "/") + "/revoked/" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Put stores r for the fleet. A revocation already stored keeps the later
// of the two untils.
func (f *Revocations) Put(ctx context.Context, r auth.Revocation) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("fleet: revocation: %w", err)
	}
	key := RevocationKey(f.opts.Prefix, r)
	for attempt := 0; attempt < 5; attempt++ {
		cur, _, err := consul.GetBounded(ctx, f.opts.Client, key, MaxRevocationBytes, api.QueryOptions{})
		if err != nil && !errors.Is(err, consul.ErrResponseTooLarge) {
			return fmt.Errorf("fleet: revocation: %w", err)
		}
		var index uint64
		if cur != nil {
			index = cur.ModifyIndex
			var old auth.Revocation
			if json.Unmarshal(cur.Value, &old) == nil && old.Until.After(r.Until) {
				r.Until = old.Until
			}
		}
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		ok, _, err := f.opts.Client.KV().CAS(&api.KVPair{Key: key, Value: v, ModifyIndex: index}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("fleet: revocation: consul kv %q: %w", key, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("fleet: revocation: consul kv %q: changed under every attempt", key)
}

// Load reads the entries once and hands them to the target; when Consul
// does not answer, the state file's are handed instead.
func (f *Revocations) Load(ctx context.Context) error {
	_, err := f.read(ctx, 0)
	if err != nil {
		f.fail(err)
		if rerr := f.restore(); rerr != nil {
			f.opts.Logger.Warn("fleet revocations: state file not used", "err", rerr)
		}
	}
	return err
}

// Run follows the entries until ctx ends; errors keep the entries in force
// and are retried with backoff.
func (f *Revocations) Run(ctx context.Context) error {
	consul.Watch(ctx, f.opts.MinBackoff, f.opts.MaxBackoff, f.read, f.fail)
	return nil
}

// read lists the folder's keys (blocking from index), reads the entries
// new or changed since they were last read, and hands the valid ones to
// the target.
func (f *Revocations) read(ctx context.Context, index uint64) (uint64, error) {
	wait := f.opts.WaitTime
	qctx, cancel := context.WithTimeout(ctx, wait+wait/16+10*time.Second)
	defer cancel()
	keys, meta, err := consul.ListKeys(qctx, f.opts.Client, f.dir, maxRevocationKeysResponse,
		api.QueryOptions{WaitIndex: index, WaitTime: wait})
	if err != nil {
		return 0, fmt.Errorf("fleet revocations: %w", err)
	}
	next, changed := consul.NextIndex(index, meta.LastIndex)
	if changed || index == 0 {
		if err := f.refresh(ctx, keys); err != nil {
			return 0, err
		}
	}
	f.mu.Lock()
	f.status.LastRead, f.status.Index, f.status.LastError = f.opts.Now(), meta.LastIndex, ""
	f.mu.Unlock()
	f.publish()
	return next, nil
}

// refresh brings the entries in line with keys: gone keys dropped, new
// ones read (at most MaxRevocations held), changed ones read again.
func (f *Revocations) refresh(ctx context.Context, keys []string) error {
	// Only keys named as RevocationKey names them are read: junk names
	// cannot push real entries past the bound.
	keys = slices.DeleteFunc(keys, func(k string) bool { return !revocationKeyName(f.dir, k) })
	slices.Sort(keys)
	if len(keys) > MaxRevocations {
		keys = keys[:MaxRevocations]
	}
	f.mu.Lock()
	known := make(map[string]revEntry, len(f.entries))
	for k, e := range f.entries {
		known[k] = e
	}
	f.mu.Unlock()
	// Entries already read are checked, not read again: a change of one
	// entry must not cost a read of every other.
	var old []string
	for _, k := range keys {
		if _, ok := known[k]; ok {
			old = append(old, k)
		}
	}
	checks, err := consul.CheckKeys(ctx, f.opts.Client, old, func(k string) uint64 { return known[k].index })
	if err != nil {
		return fmt.Errorf("fleet revocations: %w", err)
	}
	fresh := make(map[string]revEntry, len(keys))
	for i, k := range old {
		if checks[i].Unchanged {
			fresh[k] = known[k]
		}
	}
	for _, k := range keys {
		if _, ok := fresh[k]; ok {
			continue
		}
		p, _, err := consul.GetBounded(ctx, f.opts.Client, k, MaxRevocationBytes, api.QueryOptions{})
		switch {
		case errors.Is(err, consul.ErrResponseTooLarge):
			fresh[k] = revEntry{}
		case err != nil:
			return fmt.Errorf("fleet revocations: %w", err)
		case p != nil:
			fresh[k] = f.decode(ctx, p)
		}
	}
	f.mu.Lock()
	f.entries = fresh
	f.mu.Unlock()
	return nil
}

// revocationKeyName reports whether k is dir followed by 32 lower-case
// hex digits, RevocationKey's form.
func revocationKeyName(dir, k string) bool {
	name, ok := strings.CutPrefix(k, dir)
	if !ok || len(name) != 32 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil && strings.ToLower(name) == name
}

// decode checks one entry; one past its until is deleted (check-and-set).
func (f *Revocations) decode(ctx context.Context, p *api.KVPair) revEntry {
	e := revEntry{index: p.ModifyIndex}
	var r auth.Revocation
	if err := json.Unmarshal(p.Value, &r); err != nil || r.Validate() != nil || RevocationKey(f.opts.Prefix, r) != p.Key ||
		r.Bounded(f.opts.Now(), f.opts.MaxUntil) != nil {
		f.opts.Logger.Warn("fleet revocations: entry refused", "key", p.Key)
		return e
	}
	if !r.Until.After(f.opts.Now()) {
		_, _, _ = f.opts.Client.KV().DeleteCAS(&api.KVPair{Key: p.Key, ModifyIndex: p.ModifyIndex}, (&api.WriteOptions{}).WithContext(ctx))
		return e
	}
	e.r, e.ok = r, true
	return e
}

// publish hands the valid entries in force to the target and saves them.
func (f *Revocations) publish() {
	f.mu.Lock()
	now := f.opts.Now()
	var rs []auth.Revocation
	refused := 0
	for _, e := range f.entries {
		switch {
		case !e.ok:
			refused++
		case e.r.Until.After(now):
			rs = append(rs, e.r)
		}
	}
	f.status.Entries, f.status.Refused = len(rs), refused
	f.mu.Unlock()
	f.opts.Target.SetFleet(rs)
	f.save(rs)
}

func (f *Revocations) fail(err error) {
	f.mu.Lock()
	f.status.LastError = err.Error()
	f.mu.Unlock()
	f.opts.Logger.Warn("fleet revocations: consul", "err", err)
}

// Status returns the follower's state.
func (f *Revocations) Status() RevocationsStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

type savedRevocations struct {
	Version int               `json:"version"`
	Prefix  string            `json:"prefix"`
	Entries []auth.Revocation `json:"entries"`
}

func (f *Revocations) statePath() string {
	if f.opts.StateDir == "" {
		return ""
	}
	return filepath.Join(f.opts.StateDir, "fleet-revocations.json")
}

func (f *Revocations) save(rs []auth.Revocation) {
	path := f.statePath()
	if path == "" {
		return
	}
	slices.SortFunc(rs, func(a, b auth.Revocation) int {
		return strings.Compare(RevocationKey("", a), RevocationKey("", b))
	})
	data, err := json.Marshal(savedRevocations{Version: 1, Prefix: f.opts.Prefix, Entries: rs})
	f.mu.Lock()
	same := err == nil && string(data) == string(f.saved)
	f.mu.Unlock()
	if err != nil || same {
		return
	}
	if err := consul.WriteState(path, data); err != nil {
		f.opts.Logger.Warn("fleet revocations: state file not written", "err", err)
		return
	}
	f.mu.Lock()
	f.saved = data
	f.mu.Unlock()
}

func (f *Revocations) restore() error {
	path := f.statePath()
	if path == "" {
		return nil
	}
	data, err := trust.ReadFile(path, trust.State, consul.MaxStateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	var s savedRevocations
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	if s.Version != 1 || s.Prefix != f.opts.Prefix {
		return fmt.Errorf("state file %s: version %d of prefix %q, want 1 of %q", path, s.Version, s.Prefix, f.opts.Prefix)
	}
	f.mu.Lock()
	for i, r := range s.Entries {
		if i < MaxRevocations && r.Validate() == nil && r.Bounded(f.opts.Now(), f.opts.MaxUntil) == nil {
			f.entries[RevocationKey(f.opts.Prefix, r)] = revEntry{r: r, ok: true}
		}
	}
	f.saved = data
	f.mu.Unlock()
	f.publish()
	f.opts.Logger.Warn("fleet revocations: applied the last set read, from the state file, until consul answers", "path", path)
	return nil
}

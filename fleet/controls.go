package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/trust"
	"github.com/hashicorp/consul/api"
)

// Bounds on the pools' controls an edge reads from the fleet prefix.
const (
	// MaxControls is the most entries an edge follows, one per pool.
	MaxControls = 256
	// MaxControlBytes bounds one entry's value; a real one is about 150
	// bytes.
	MaxControlBytes = 1024
	// maxControlsKeysResponse bounds the answer listing the keys.
	maxControlsKeysResponse = int64(MaxControls)*(maxFleetName*3+64) + 4096
)

// Control is the operator's fleet-scope control of one pool's
// connections, kept at PREFIX/rebalance/<pool> (path-escaped): its canary
// and whether the moves of live connections are paused. The zero Control
// is none, and is a deleted entry.
type Control struct {
	Canary *balance.Canary `json:"canary,omitempty"`
	Paused bool            `json:"paused,omitempty"`
	// At and By say when and through which edge it was written.
	At time.Time `json:"at"`
	By string    `json:"by,omitempty"`
}

// controlWire is an entry's JSON.
type controlWire struct {
	V int `json:"v"`
	Control
}

// None reports whether c asks nothing.
func (c Control) None() bool { return c.Canary == nil && !c.Paused }

// DecodeControl parses an entry's value: bounded, of version 1, with no
// unknown field, a canary balance.Canary.Check accepts and a short edge
// id.
func DecodeControl(v []byte) (Control, error) {
	if len(v) > MaxControlBytes {
		return Control{}, fmt.Errorf("%d bytes, more than %d", len(v), MaxControlBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	var w controlWire
	if err := dec.Decode(&w); err != nil {
		return Control{}, fmt.Errorf("not a control: %w", err)
	}
	if dec.More() {
		return Control{}, errors.New("more than one JSON value")
	}
	if w.V != 1 {
		return Control{}, fmt.Errorf("version %d, want 1", w.V)
	}
	if w.Canary != nil {
		if err := w.Canary.Check(); err != nil {
			return Control{}, err
		}
	}
	if err := checkFleetName("edge id (by)", w.By, true); err != nil {
		return Control{}, err
	}
	return w.Control, nil
}

// ControlsOptions configure Controls.
type ControlsOptions struct {
	// Client reaches Consul (NewClient: every answer bounded). Required.
	Client *api.Client
	// Prefix is the fleet's KV prefix; entries live under
	// Prefix/rebalance/. Required.
	Prefix string
	// Layers returns the fleet layer of the pools of a name (Actions.Layer).
	// Required.
	Layers func(pool string) *balance.Layer
	// Edge is this edge's id, written into the entries it stores.
	Edge string
	// StateDir, when set, keeps the last entries read in
	// StateDir/fleet-rebalance.json, applied at a start while Consul does not
	// answer: a canary stays in force across a restart.
	StateDir               string
	WaitTime               time.Duration
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	Now                    func() time.Time
}

// Controls keeps the pools' controls of fleet scope (canaries, pauses) in
// Consul KV and follows them with a blocking query on the folder, so that
// a canary set through any edge is applied by every edge within the round
// trip of a blocking query's answer, to the fleet layer of its pool's name
// (balance.Layer.SetCanary, SetPaused). An entry that is refused is logged
// and changes nothing: the pool keeps the last valid control.
type Controls struct {
	opts ControlsOptions
	dir  string

	mu      sync.Mutex
	entries map[string]controlEntry // by pool
	status  ControlsStatus
	saved   []byte
}

type controlEntry struct {
	index uint64
	c     Control
}

// ControlsStatus is a point-in-time view for /status.
type ControlsStatus struct {
	Prefix    string             `json:"prefix"`
	Controls  map[string]Control `json:"controls,omitempty"`
	Refused   int                `json:"refused"`
	Index     uint64             `json:"index"`
	LastRead  time.Time          `json:"last_read,omitzero"`
	LastError string             `json:"last_error,omitempty"`
}

// NewControls validates o and fills defaults.
func NewControls(o ControlsOptions) (*Controls, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("fleet: controls: consul client is required")
	case strings.Trim(o.Prefix, "/") == "":
		return nil, errors.New("fleet: controls: prefix is required")
	case o.Layers == nil:
		return nil, errors.New("fleet: controls: layers are required")
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	consul.Follow(&o.WaitTime, &o.MinBackoff, &o.MaxBackoff, &o.Logger, &o.Now)
	return &Controls{opts: o, dir: o.Prefix + "/rebalance/", entries: map[string]controlEntry{},
		status: ControlsStatus{Prefix: o.Prefix}}, nil
}

// ControlKey is the KV key of pool's control under prefix.
func ControlKey(prefix, pool string) string {
	return strings.Trim(prefix, "/") + "/rebalance/" + url.PathEscape(pool)
}

// Put stores pool's canary (nil: none) and pause for the fleet (neither
// deletes the entry) and applies them here at once.
func (f *Controls) Put(ctx context.Context, pool string, canary *balance.Canary, paused bool) error {
	c := Control{Canary: canary, Paused: paused}
	if err := checkFleetName("pool", pool, false); err != nil {
		return fmt.Errorf("fleet: control: %w", err)
	}
	key := ControlKey(f.opts.Prefix, pool)
	w := (&api.WriteOptions{}).WithContext(ctx)
	if c.None() {
		if _, err := f.opts.Client.KV().Delete(key, w); err != nil {
			return fmt.Errorf("fleet: control: consul kv %q: %w", key, err)
		}
	} else {
		c.At, c.By = f.opts.Now().UTC(), f.opts.Edge
		v, err := json.Marshal(controlWire{V: 1, Control: c})
		if err != nil {
			return err
		}
		if _, err := DecodeControl(v); err != nil {
			return fmt.Errorf("fleet: control of pool %q: %w", pool, err)
		}
		if _, err := f.opts.Client.KV().Put(&api.KVPair{Key: key, Value: v}, w); err != nil {
			return fmt.Errorf("fleet: control: consul kv %q: %w", key, err)
		}
	}
	f.mu.Lock()
	old := f.entries[pool]
	if c.None() {
		delete(f.entries, pool)
	} else {
		f.entries[pool] = controlEntry{index: old.index, c: c}
	}
	f.mu.Unlock()
	f.applyPool(pool, c)
	return nil
}

// Load reads the entries once and applies them; when Consul does not
// answer, the state file's are applied instead.
func (f *Controls) Load(ctx context.Context) error {
	_, err := f.read(ctx, 0)
	if err != nil {
		f.fail(err)
		if rerr := f.restore(); rerr != nil {
			f.opts.Logger.Warn("fleet controls: state file not used", "err", rerr)
		}
	}
	return err
}

// Run follows the entries until ctx ends; errors keep the controls in
// force and are retried with backoff.
func (f *Controls) Run(ctx context.Context) error {
	consul.Watch(ctx, f.opts.MinBackoff, f.opts.MaxBackoff, f.read, f.fail)
	return nil
}

// read lists the folder (blocking from index), reads the entries that
// changed, and applies them.
func (f *Controls) read(ctx context.Context, index uint64) (uint64, error) {
	wait := f.opts.WaitTime
	qctx, cancel := context.WithTimeout(ctx, wait+wait/16+10*time.Second)
	defer cancel()
	keys, meta, err := consul.ListKeys(qctx, f.opts.Client, f.dir, maxControlsKeysResponse,
		api.QueryOptions{WaitIndex: index, WaitTime: wait})
	if err != nil {
		return 0, fmt.Errorf("fleet controls: %w", err)
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
	return next, nil
}

// refresh reads the entries of keys that are new or changed, drops the
// gone ones, and applies the result.
func (f *Controls) refresh(ctx context.Context, keys []string) error {
	pools := map[string]string{} // pool -> key
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, f.dir)
		pool, err := url.PathUnescape(name)
		if ok && err == nil && url.PathEscape(pool) == name && checkFleetName("pool", pool, false) == nil {
			pools[pool] = k
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for p := range pools {
			if !yield(p) {
				return
			}
		}
	})
	if len(names) > MaxControls {
		names = names[:MaxControls]
	}
	fresh := make(map[string]controlEntry, len(names))
	refused := 0
	for _, pool := range names {
		p, _, err := consul.GetBounded(ctx, f.opts.Client, pools[pool], MaxControlBytes, api.QueryOptions{})
		if err != nil && !errors.Is(err, consul.ErrResponseTooLarge) {
			return fmt.Errorf("fleet controls: %w", err)
		}
		f.mu.Lock()
		old, had := f.entries[pool]
		f.mu.Unlock()
		if p == nil || err != nil {
			refused++
			if had {
				fresh[pool] = old
			}
			continue
		}
		c, derr := DecodeControl(p.Value)
		if derr != nil {
			refused++
			if had {
				fresh[pool] = old
			}
			if !had || old.index != p.ModifyIndex {
				f.opts.Logger.Warn("fleet controls: entry refused; the pool keeps its last control", "key", p.Key, "err", derr)
			}
			continue
		}
		fresh[pool] = controlEntry{index: p.ModifyIndex, c: c}
	}
	f.set(fresh, refused)
	return nil
}

// set makes fresh the entries in force, applies every pool whose control
// changed, and saves them.
func (f *Controls) set(fresh map[string]controlEntry, refused int) {
	f.mu.Lock()
	old := f.entries
	f.entries = fresh
	f.status.Refused = refused
	f.mu.Unlock()
	for pool, e := range fresh {
		if o, ok := old[pool]; !ok || !sameControl(o.c, e.c) {
			f.applyPool(pool, e.c)
		}
	}
	for pool := range old {
		if _, ok := fresh[pool]; !ok {
			f.applyPool(pool, Control{})
		}
	}
	f.save()
}

func sameControl(a, b Control) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// applyPool sets c on the fleet layer of pool's name.
func (f *Controls) applyPool(pool string, c Control) {
	l := f.opts.Layers(pool)
	if err := l.SetCanary(c.Canary); err != nil {
		f.opts.Logger.Warn("fleet controls: canary not applied", "pool", pool, "err", err)
		return
	}
	l.SetPaused(c.Paused)
	f.opts.Logger.Info("fleet control applied", "pool", pool, "canary", c.Canary, "paused", c.Paused, "by", c.By, "at", c.At)
}

func (f *Controls) fail(err error) {
	f.mu.Lock()
	f.status.LastError = err.Error()
	f.mu.Unlock()
	f.opts.Logger.Warn("fleet controls: consul", "err", err)
}

// Status returns the follower's state.
func (f *Controls) Status() ControlsStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.status
	if len(f.entries) > 0 {
		st.Controls = make(map[string]Control, len(f.entries))
		for p, e := range f.entries {
			st.Controls[p] = e.c
		}
	}
	return st
}

type savedControls struct {
	Version int                `json:"version"`
	Prefix  string             `json:"prefix"`
	Entries map[string]Control `json:"entries"`
}

func (f *Controls) statePath() string {
	if f.opts.StateDir == "" {
		return ""
	}
	return filepath.Join(f.opts.StateDir, "fleet-rebalance.json")
}

func (f *Controls) save() {
	path := f.statePath()
	if path == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := savedControls{Version: 1, Prefix: f.opts.Prefix, Entries: map[string]Control{}}
	for p, e := range f.entries {
		s.Entries[p] = e.c
	}
	data, err := json.Marshal(s)
	if err != nil || bytes.Equal(data, f.saved) {
		return
	}
	if err := consul.WriteState(path, data); err != nil {
		f.opts.Logger.Warn("fleet controls: state file not written", "err", err)
		return
	}
	f.saved = data
}

// restore applies the state file's controls, each checked as an entry
// read from Consul is.
func (f *Controls) restore() error {
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
	var s savedControls
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	if s.Version != 1 || s.Prefix != f.opts.Prefix {
		return fmt.Errorf("state file %s: version %d of prefix %q, want 1 of %q", path, s.Version, s.Prefix, f.opts.Prefix)
	}
	fresh := map[string]controlEntry{}
	for pool, c := range s.Entries {
		v, err := json.Marshal(controlWire{V: 1, Control: c})
		if err != nil || len(fresh) >= MaxControls || checkFleetName("pool", pool, false) != nil {
			continue
		}
		if c, err = DecodeControl(v); err == nil {
			fresh[pool] = controlEntry{c: c}
		}
	}
	f.set(fresh, 0)
	f.opts.Logger.Warn("fleet controls: applied the last set read, from the state file, until consul answers", "path", path)
	return nil
}

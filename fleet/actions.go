package fleet

import (
	"bytes"
	"context"
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

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/trust"
	"github.com/hashicorp/consul/api"
)

// ActionTarget is what Actions acts on: this edge's pools and the
// proxy's drain of a backend's live connections.
type ActionTarget interface {
	// Pool returns the running pool of that name, or nil.
	Pool(name string) *balance.Pool
	// DrainConns sends the live WebSockets on b close 1012 spread over
	// window and returns how many it will close.
	DrainConns(b *balance.Backend, window time.Duration) int
}

// ErrNoSuchBackend is returned by Actions.Act for a pool or backend
// this edge does not have: an action is only written for a backend that
// exists.
var ErrNoSuchBackend = errors.New("no such pool or backend")

// ActionsOptions configure a Actions.
type ActionsOptions struct {
	// Client reaches Consul; NewClient with MaxResponseBytes bounds what
	// an answer on the prefix may make this edge read. Required.
	Client *api.Client
	// Prefix is the fleet's KV prefix (consul.fleet.prefix); actions live
	// under Prefix/admin/. Required.
	Prefix string
	// Edge is this edge's id, written into the actions it stores.
	Edge string
	// Target receives the actions. Required.
	Target ActionTarget
	// WaitTime is the blocking-query wait; default DefaultWaitTime.
	WaitTime time.Duration
	// StateDir, when set, keeps the last set of valid actions read in
	// StateDir/fleet-actions.json: an edge that starts while Consul does
	// not answer (or answers with an error) applies those, so a backend the
	// fleet drained stays drained across the restart.
	StateDir string
	// MinBackoff and MaxBackoff bound the retry delay after errors.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	Now                    func() time.Time
}

// Actions keeps the operator's actions of fleet scope (drain, disable,
// enable, weight) in Consul KV, one entry per pool and backend under
// Prefix/admin/, and follows them with one blocking query on the folder,
// so every edge applies an action within the round trip of a blocking
// query's answer, and an edge that starts applies them before it serves
// (Load). An entry is written to the fleet layer of its pool's name
// (Layer, balance.Layer), which every pool of that name is built with, and
// a new drain also sends the backend's live connections 1012 spread over its
// window, exactly like the admin API's local drain.
//
// Whatever is read is bounded and checked (DecodeAction,
// ParseActionKey, MaxActions): a refused entry is logged once and
// changes nothing (an entry that was valid keeps its last valid value), and
// an entry naming a pool or backend this edge does not have takes effect
// when a member of that ID joins, so a writer of the prefix can set the
// state and weight of registered backends but never reach another.
type Actions struct {
	opts ActionsOptions
	dir  string

	mu      sync.Mutex
	desired map[string]Action  // guarded by mu; by key: the last valid entry
	applied map[string]applied // guarded by mu; by key: what this edge applied
	refused map[string]uint64  // guarded by mu; by key: the ModifyIndex last refused (logged once)
	missing map[string]bool    // guarded by mu; keys logged as naming nothing here
	// written is, by key, the index at which this edge's own write was
	// read back: an answer older than that (read before the write, applied
	// after it) does not undo what Act applied. Guarded by mu.
	written map[string]uint64
	// layers are the fleet layers of the pools, by pool name (Layer).
	layers map[string]*balance.Layer // guarded by mu
	status ActionsStatus             // guarded by mu
	saved  []byte                    // guarded by mu; the state file's last contents
}

// applied is an action as this edge applied it, and how many live
// connections its drain asked to close.
type applied struct {
	a       Action
	closing int
}

// ActionsStatus is a point-in-time view for /status.
type ActionsStatus struct {
	Prefix string `json:"prefix"`
	// Actions are the valid entries, sorted by pool and backend.
	Actions []ActionDoc `json:"actions"`
	// Refused counts the entries of the last answer that were refused;
	// Errors says why (the first few).
	Refused int `json:"refused"`
	// Excess counts, among the refused, the entries over MaxActions.
	Excess      int       `json:"excess,omitempty"`
	Errors      []string  `json:"errors,omitempty"`
	Index       uint64    `json:"index"`
	LastRead    time.Time `json:"last_read,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// ActionDoc is one action in /status.
type ActionDoc struct {
	Pool    string    `json:"pool"`
	Backend string    `json:"backend"`
	State   string    `json:"state"`
	Weight  int       `json:"weight,omitempty"`
	Window  float64   `json:"window_seconds,omitempty"`
	At      time.Time `json:"at"`
	By      string    `json:"by,omitempty"`
	// Applied is false while this edge has no such pool or member.
	Applied bool `json:"applied"`
}

// NewActions validates o and fills defaults.
func NewActions(o ActionsOptions) (*Actions, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("fleet: actions: consul client is required")
	case strings.Trim(o.Prefix, "/") == "":
		return nil, errors.New("fleet: actions: prefix is required")
	case o.Target == nil:
		return nil, errors.New("fleet: actions: target is required")
	}
	if err := checkFleetName("edge id", o.Edge, true); err != nil {
		return nil, fmt.Errorf("fleet: actions: %w", err)
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	consul.Follow(&o.WaitTime, &o.MinBackoff, &o.MaxBackoff, &o.Logger, &o.Now)
	return &Actions{
		opts: o, dir: fleetActionsDir(o.Prefix),
		desired: map[string]Action{}, applied: map[string]applied{},
		refused: map[string]uint64{}, missing: map[string]bool{}, written: map[string]uint64{},
		layers: map[string]*balance.Layer{},
		status: ActionsStatus{Prefix: o.Prefix, Actions: []ActionDoc{}},
	}, nil
}

// Load reads the actions once and applies them: an edge that starts calls
// it before it serves, so what the fleet drained stays drained across its
// restart.
//
// When Consul does not answer, the actions saved in StateDir are applied
// instead (and replaced by Consul's as soon as it answers).
func (f *Actions) Load(ctx context.Context) error {
	_, err := f.read(ctx, 0)
	if err != nil {
		f.fail(err)
		if rerr := f.restore(); rerr != nil {
			f.opts.Logger.Warn("fleet actions: state file not used", "err", rerr)
		}
	}
	return err
}

// stateVersion is bumped when the state file format changes incompatibly.
const stateVersion = 1

// savedActions is the state file: the valid entries, as stored in Consul.
type savedActions struct {
	Version int               `json:"version"`
	Prefix  string            `json:"prefix"`
	Entries map[string]string `json:"entries"`
}

// statePath is StateDir/fleet-actions.json, or "" without StateDir.
func (f *Actions) statePath() string {
	if f.opts.StateDir == "" {
		return ""
	}
	return filepath.Join(f.opts.StateDir, "fleet-actions.json")
}

// save writes the desired set to the state file when it changed; an error
// is logged and the file keeps its last contents.
func (f *Actions) save() {
	path := f.statePath()
	if path == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := savedActions{Version: stateVersion, Prefix: f.opts.Prefix, Entries: make(map[string]string, len(f.desired))}
	for k, a := range f.desired {
		if v, err := EncodeAction(a); err == nil {
			s.Entries[k] = string(v)
		}
	}
	data, err := json.Marshal(s)
	if err != nil || bytes.Equal(data, f.saved) {
		return
	}
	if err := consul.WriteState(path, data); err != nil {
		f.opts.Logger.Warn("fleet actions: state file not written", "err", err)
		return
	}
	f.saved = data
}

// restore applies the state file's actions, each checked as an entry read
// from Consul is: the file is the operator's, but it was written from KV.
func (f *Actions) restore() error {
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
	var s savedActions
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	if s.Version != stateVersion || s.Prefix != f.opts.Prefix {
		return fmt.Errorf("state file %s: version %d of prefix %q, want %d of %q", path, s.Version, s.Prefix, stateVersion, f.opts.Prefix)
	}
	pairs := make(api.KVPairs, 0, len(s.Entries))
	for k, v := range s.Entries {
		pairs = append(pairs, &api.KVPair{Key: k, Value: []byte(v), ModifyIndex: notFetched})
	}
	var excess []string
	if len(pairs) > MaxActions {
		for _, p := range pairs[MaxActions:] {
			excess = append(excess, p.Key)
		}
		pairs = pairs[:MaxActions]
	}
	f.apply(pairs, excess, 0)
	f.mu.Lock()
	f.saved = data
	n := len(f.desired)
	f.mu.Unlock()
	f.opts.Logger.Warn("fleet actions: applied the last set read, from the state file, until consul answers",
		"path", path, "actions", n)
	return nil
}

// Run follows the actions until ctx ends. Errors keep the actions in force
// and are retried with backoff.
func (f *Actions) Run(ctx context.Context) error {
	consul.Watch(ctx, f.opts.MinBackoff, f.opts.MaxBackoff, f.read, f.fail)
	return nil
}

// read performs one keys-only query on the folder (blocking from index
// when it is not 0), fetches the entries one by one and applies them; it
// returns the index to block on next. Entries are fetched one by one so a
// writer of the prefix who adds keys or huge values gets those entries
// refused, not the whole answer: the valid ones stay in force.
func (f *Actions) read(ctx context.Context, index uint64) (uint64, error) {
	wait := f.opts.WaitTime
	qctx, cancel := context.WithTimeout(ctx, wait+wait/16+10*time.Second)
	defer cancel()
	lctx, lim := consul.WithResponseLimit(qctx, MaxActionsResponse)
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(lctx)
	keys, meta, err := f.opts.Client.KV().Keys(f.dir, "", q)
	if err == nil {
		err = lim.Check()
	}
	if err != nil {
		return 0, fmt.Errorf("fleet actions: consul kv keys %q: %w", f.dir, err)
	}
	next, changed := consul.NextIndex(index, meta.LastIndex)
	if changed || index == 0 {
		pairs, excess, err := f.fetch(ctx, keys)
		if err != nil {
			return 0, err
		}
		f.apply(pairs, excess, meta.LastIndex)
	}
	f.mu.Lock()
	f.status.LastRead, f.status.Index = f.opts.Now(), meta.LastIndex
	f.status.LastError, f.status.LastErrorAt = "", time.Time{}
	f.mu.Unlock()
	f.save()
	return next, nil
}

// fetch reads the entries of keys, at most MaxActions of them: keys
// naming a backend of this edge first, so keys added by a writer of the
// prefix cannot push a real action out; the keys left over are returned
// as excess. A key that does not parse is returned without its value (it
// is refused by apply), and a value over the client's bound as an empty
// pair that DecodeAction refuses.
func (f *Actions) fetch(ctx context.Context, keys []string) (pairs api.KVPairs, excess []string, err error) {
	valid := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, _, err := ParseActionKey(f.opts.Prefix, k); err != nil {
			pairs = append(pairs, &api.KVPair{Key: k, ModifyIndex: notFetched})
			continue
		}
		valid = append(valid, k)
	}
	slices.SortStableFunc(valid, func(x, y string) int { return f.rank(x) - f.rank(y) })
	if len(valid) > MaxActions {
		valid, excess = valid[:MaxActions], valid[MaxActions:]
	}
	for _, k := range valid {
		p, _, err := consul.GetBounded(ctx, f.opts.Client, k, MaxActionBytes, api.QueryOptions{})
		switch {
		case errors.Is(err, consul.ErrResponseTooLarge):
			// Refused before it was decoded, as DecodeAction would.
			idx, ok := consul.TooLargeIndex(err)
			if !ok {
				idx = notFetched
			}
			p = &api.KVPair{Key: k, Value: make([]byte, MaxActionBytes+1), ModifyIndex: idx}
		case err != nil:
			return nil, nil, fmt.Errorf("fleet actions: %w", err)
		case p == nil:
			continue // deleted since the keys were listed
		}
		pairs = append(pairs, p)
	}
	return pairs, excess, nil
}

// maxLoggedRefusals bounds the refusals one answer logs.
const maxLoggedRefusals = 32

// notFetched is the ModifyIndex given to an entry refused without its
// value being read, so its refusal is still logged once.
const notFetched = ^uint64(0)

// rank orders keys for fetch: 0 for one naming a backend this edge has, 1
// for any other.
func (f *Actions) rank(key string) int {
	pool, backend, _ := ParseActionKey(f.opts.Prefix, key)
	if p := f.opts.Target.Pool(pool); p != nil && p.Snapshot().ByID(backend) != nil {
		return 0
	}
	return 1
}

// fail records an error.
func (f *Actions) fail(err error) {
	f.mu.Lock()
	first := f.status.LastError == ""
	f.status.LastError, f.status.LastErrorAt = err.Error(), f.opts.Now()
	f.mu.Unlock()
	if first {
		f.opts.Logger.Warn("fleet actions: keeping the actions in force", "prefix", f.opts.Prefix, "err", err)
	}
}

// apply takes one answer, of index: the valid entries become the desired
// set (refused ones and the excess keep their last valid value, and keys
// this edge wrote after the answer was read keep what it wrote), and every
// change is applied.
func (f *Actions) apply(pairs api.KVPairs, excess []string, index uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := make(map[string]Action, len(pairs))
	refused := map[string]uint64{}
	var errs []string
	keep := func(k string) {
		if old, ok := f.desired[k]; ok {
			next[k] = old
		}
	}
	for _, p := range pairs {
		a, err := f.decode(p, refused, len(errs) < maxLoggedRefusals)
		if err != nil {
			errs = append(errs, err.Error())
			keep(p.Key)
			continue
		}
		next[p.Key] = a
	}
	for _, k := range excess {
		errs = append(errs, fmt.Sprintf("fleet action %s: more than %d entries under %q: ignored", k, MaxActions, f.dir))
		keep(k)
	}
	if len(excess) > 0 && len(excess) != f.status.Excess {
		f.opts.Logger.Warn("fleet actions: too many entries; the excess is ignored", "prefix", f.opts.Prefix,
			"max", MaxActions, "ignored", len(excess), "first", excess[0])
	}
	f.status.Excess = len(excess)
	f.refused = refused
	for k, w := range f.written {
		if index >= w {
			delete(f.written, k)
			continue
		}
		delete(next, k)
		if a, ok := f.desired[k]; ok {
			next[k] = a
		}
	}
	f.desired = next
	f.status.Refused = len(errs)
	f.status.Errors = errs[:min(len(errs), maxFleetErrors)]
	f.reconcileLocked()
}

// decode parses one entry, logging a refusal once per ModifyIndex; the
// refused entries of this answer are recorded in refused.
// Only the first few refusals of an answer are logged (log), so keys
// added by the thousand do not flood the log.
func (f *Actions) decode(p *api.KVPair, refused map[string]uint64, log bool) (Action, error) {
	pool, backend, err := ParseActionKey(f.opts.Prefix, p.Key)
	var a Action
	if err == nil {
		a, err = DecodeAction(pool, backend, p.Value)
	}
	if err == nil {
		return a, nil
	}
	err = fmt.Errorf("fleet action %s: %w", p.Key, err)
	refused[p.Key] = p.ModifyIndex
	if last, ok := f.refused[p.Key]; log && (!ok || last != p.ModifyIndex) {
		f.opts.Logger.Warn("fleet action refused; nothing changed", "key", p.Key, "modify_index", p.ModifyIndex, "err", err)
	}
	return Action{}, err
}

// reconcileLocked makes every pool agree with the desired set: new and
// changed actions are applied, removed ones cleared. Callers hold mu.
func (f *Actions) reconcileLocked() {
	for k, ap := range f.applied {
		if _, ok := f.desired[k]; !ok {
			f.clearLocked(k, ap)
		}
	}
	for k, a := range f.desired {
		f.applyLocked(k, a)
	}
	f.statusLocked()
}

// applyLocked applies one action to the fleet layer of its pool's name,
// whether or not a pool of that name has the backend yet: balance gives
// the setting to a member that joins under that ID in the snapshot that
// adds it, and to a pool a reload builds, so a backend drained by the
// fleet is never pickable, not even for a moment. The layers hold at most
// the desired set (MaxActions). It returns how many live connections a
// new drain asked to close. Callers hold mu.
func (f *Actions) applyLocked(key string, a Action) int {
	prev, had := f.applied[key]
	if had && prev.a.Same(a) {
		// Applied already: by the blocking query's answer, when it came
		// before the writer's own call.
		return prev.closing
	}
	bs, err := f.layerLocked(a.Pool).Set(a.Backend, balance.Override{State: a.State, Weight: a.Weight})
	if err != nil {
		f.opts.Logger.Error("fleet action not applied", "pool", a.Pool, "backend", a.Backend, "err", err)
		return 0
	}
	if len(bs) == 0 && !f.missing[key] {
		f.missing[key] = true
		f.opts.Logger.Warn("fleet action names no backend of this edge; applied if one joins under that id",
			"pool", a.Pool, "backend", a.Backend, "pool_exists", f.opts.Target.Pool(a.Pool) != nil)
	} else if len(bs) > 0 {
		delete(f.missing, key)
	}
	n := 0
	if a.State == balance.AdminDrain && (!had || prev.a.State != balance.AdminDrain || !prev.a.DrainAt.Equal(a.DrainAt)) {
		// A new drain. RFC 6455 §7.4.1 / IANA: 1012 "service restart",
		// as the local drain sends, spread over the action's window.
		for _, b := range bs {
			n += f.opts.Target.DrainConns(b, a.Window)
		}
	}
	f.applied[key] = applied{a: a, closing: n}
	f.opts.Logger.Info("fleet action applied", "pool", a.Pool, "backend", a.Backend, "state", a.State.String(),
		"weight", a.Weight, "window", a.Window.String(), "by", a.By, "at", a.At, "closing", n)
	return n
}

// Layer is the fleet layer of the pools named pool: every pool of that
// name is built with it (balance.PoolOptions.Fleet), so it starts with the
// fleet's actions on its members and follows every later one.
func (f *Actions) Layer(pool string) *balance.Layer {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.layerLocked(pool)
}

// layerLocked is Layer. Callers hold mu.
func (f *Actions) layerLocked(pool string) *balance.Layer {
	l := f.layers[pool]
	if l == nil {
		l = balance.NewLayer()
		f.layers[pool] = l
	}
	return l
}

// clearLocked removes an action this edge applied. Callers hold mu.
func (f *Actions) clearLocked(key string, ap applied) {
	delete(f.applied, key)
	delete(f.missing, key)
	if _, err := f.layerLocked(ap.a.Pool).Set(ap.a.Backend, balance.Override{}); err != nil {
		f.opts.Logger.Error("fleet action not cleared", "pool", ap.a.Pool, "backend", ap.a.Backend, "err", err)
		return
	}
	f.opts.Logger.Info("fleet action cleared", "pool", ap.a.Pool, "backend", ap.a.Backend)
}

// Act changes the fleet's action on a backend this edge has: change gets
// the entry as stored (the zero action when there is none) and edits it (a
// drain it leaves without DrainAt is a new drain, started now);
// the result is written with a check-and-set on the index read (deleted
// when it is no action), then applied here at once, as the other edges
// apply it when their blocking query answers. It returns the action and
// how many live connections on this edge a new drain asked to close.
func (f *Actions) Act(ctx context.Context, pool, backend string, change func(a *Action)) (Action, int, error) {
	if p := f.opts.Target.Pool(pool); p == nil || p.Snapshot().ByID(backend) == nil {
		return Action{}, 0, fmt.Errorf("fleet action on pool %q backend %q: %w", pool, backend, ErrNoSuchBackend)
	}
	key := ActionKey(f.opts.Prefix, pool, backend)
	w := (&api.WriteOptions{}).WithContext(ctx)
	// A lost check-and-set means another operator acted meanwhile: read
	// theirs and apply the change on top, at most three times.
	for range 3 {
		pair, _, err := consul.GetBounded(ctx, f.opts.Client, key, MaxActionBytes, api.QueryOptions{})
		a, index := Action{Pool: pool, Backend: backend}, uint64(0)
		if idx, ok := consul.TooLargeIndex(err); ok {
			// An entry too large to be an action is replaced whole,
			// unread, like a broken one.
			pair, index, err = nil, idx, nil
		}
		if err != nil {
			return Action{}, 0, fmt.Errorf("fleet action: %w", err)
		}
		if pair != nil {
			index = pair.ModifyIndex
			if cur, err := DecodeAction(pool, backend, pair.Value); err == nil {
				a = cur // a broken entry is replaced whole
			}
		}
		change(&a)
		now := f.opts.Now().UTC().Round(0)
		a.Pool, a.Backend, a.By, a.At = pool, backend, f.opts.Edge, now
		switch {
		case a.State != balance.AdminDrain:
			a.Window, a.DrainAt = 0, time.Time{}
		case a.DrainAt.IsZero():
			a.DrainAt = now
		}
		ok, err := f.store(key, a, index, w)
		if err != nil {
			return Action{}, 0, err
		}
		if ok {
			// Read the write back for its index: an answer of the
			// blocking query older than it must not undo it here.
			_, meta, err := consul.GetBounded(ctx, f.opts.Client, key, MaxActionBytes, api.QueryOptions{})
			if err != nil {
				return Action{}, 0, fmt.Errorf("fleet action: consul kv %q: read back: %w", key, err)
			}
			return a, f.applyWritten(key, a, meta.LastIndex), nil
		}
	}
	return Action{}, 0, fmt.Errorf("fleet action: consul kv %q kept changing while it was written", key)
}

// store writes a (or deletes the entry for no action) with a check-and-set
// on index; false means another write came first.
func (f *Actions) store(key string, a Action, index uint64, w *api.WriteOptions) (bool, error) {
	kv := f.opts.Client.KV()
	if a.None() {
		if index == 0 {
			return true, nil
		}
		ok, _, err := kv.DeleteCAS(&api.KVPair{Key: key, ModifyIndex: index}, w)
		if err != nil {
			return false, fmt.Errorf("fleet action: consul kv %q: delete: %w", key, err)
		}
		return ok, nil
	}
	v, err := EncodeAction(a)
	if err != nil {
		return false, fmt.Errorf("fleet action %q: %w", key, err)
	}
	ok, _, err := kv.CAS(&api.KVPair{Key: key, Value: v, ModifyIndex: index}, w)
	if err != nil {
		return false, fmt.Errorf("fleet action: consul kv %q: write: %w", key, err)
	}
	return ok, nil
}

// applyWritten applies an action this edge just stored, so the answer to
// the operator reflects it; the blocking query's answer then finds it
// applied and does nothing twice.
func (f *Actions) applyWritten(key string, a Action, index uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.statusLocked()
	f.written[key] = index
	if a.None() {
		delete(f.desired, key)
		if ap, ok := f.applied[key]; ok {
			f.clearLocked(key, ap)
		}
		return 0
	}
	f.desired[key] = a
	return f.applyLocked(key, a)
}

// statusLocked rebuilds the list of actions in status. Callers hold mu.
func (f *Actions) statusLocked() {
	docs := make([]ActionDoc, 0, len(f.desired))
	for k, a := range f.desired {
		_, ok := f.applied[k]
		pool := f.opts.Target.Pool(a.Pool)
		ok = ok && pool != nil && pool.Snapshot().ByID(a.Backend) != nil
		d := ActionDoc{Pool: a.Pool, Backend: a.Backend, State: a.State.String(), Weight: a.Weight,
			Window: a.Window.Seconds(), At: a.At, By: a.By, Applied: ok}
		docs = append(docs, d)
	}
	slices.SortFunc(docs, func(x, y ActionDoc) int {
		if c := strings.Compare(x.Pool, y.Pool); c != 0 {
			return c
		}
		return strings.Compare(x.Backend, y.Backend)
	})
	f.status.Actions = docs
}

// Status returns the current status. Safe for concurrent use.
func (f *Actions) Status() ActionsStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusLocked() // Applied follows the members joining and leaving
	s := f.status
	s.Actions = slices.Clone(s.Actions)
	s.Errors = slices.Clone(s.Errors)
	return s
}

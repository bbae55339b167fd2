package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// Defaults for LoadOptions.
const (
	// DefaultPublishEvery is how often an edge looks at its load and
	// publishes it if it changed; issue 21 bounds it at once every 2 s.
	DefaultPublishEvery = 2 * time.Second
	// DefaultSessionTTL is the TTL of the session an edge's record is
	// bound to (Consul's minimum is 10 s); Consul deletes the record of an
	// edge that stopped renewing between one and two TTLs later.
	DefaultSessionTTL = 10 * time.Second
	// DefaultLoadWaitTime is the follower's blocking-query wait: a quiet
	// fleet still answers this often, which is what tells fresh from stale.
	DefaultLoadWaitTime = 5 * time.Second
	// DefaultStaleAfter is how long after the last answer the sums are
	// stale: more than a whole wait, so a quiet fleet never looks stale.
	DefaultStaleAfter = 10 * time.Second
)

// maxFleetErrors is how many refusal reasons a snapshot keeps.
const maxFleetErrors = 4

// LoadOptions configure a Load.
type LoadOptions struct {
	Client *api.Client // required
	// Prefix is the fleet's KV prefix, e.g. "edge"; records live under
	// Prefix/edges/<id>. Required.
	Prefix string
	// ID names this edge in the fleet: a KV key segment (letters, digits,
	// '.', '_', '-', ':'). Required.
	ID string
	// Collect returns this edge's record now; Load sets ID and
	// Published. Required. It runs on the publisher's goroutine.
	Collect func() Record
	// Published, when set, is called with every record once Consul holds
	// it (written, or unchanged since it was), on the publisher's
	// goroutine: what the other edges can now count.
	Published func(Record)
	// Known, when set, filters what is read: pools and backends it refuses
	// are dropped from every record (see DecodeRecord).
	Known func(pool, backend string) bool
	// PublishEvery, SessionTTL, WaitTime, StaleAfter and ReadInterval
	// default to the DefaultFleet* values.
	PublishEvery, SessionTTL, WaitTime, StaleAfter, ReadInterval time.Duration
	// QuietInterval is the least time between a read that read no record
	// and saw none go (the prefix changed only in keys no session holds,
	// or in keys refused before) and the next read: a writer of such keys
	// wakes an edge no more often than a quiet fleet does. Default
	// WaitTime; a record that changes meanwhile is read at most this late.
	QuietInterval time.Duration
	// MinBackoff and MaxBackoff bound the retry delay after errors.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	Now                    func() time.Time
}

// Load publishes this edge's load under the fleet prefix and follows
// every edge's: one key per edge, bound to a Consul session with a TTL and
// behaviour delete, so a dead edge's numbers vanish by themselves; written
// at most once every PublishEvery and only when its load changed (no
// per-connection event becomes a write); followed with one keys-only
// blocking query on the prefix, whose answers become immutable
// FleetSnapshots.
//
// Anyone who can write the prefix can add keys, so a read never lists
// values: Consul says which keys changed since they were read and which
// no session holds (without their values), and only the changed keys held
// by a session are read, one by one, each answer bounded at
// MaxRecordBytes before it is decoded; at most MaxKeys keys are
// looked at, and reads start at most every ReadInterval. The client must
// be made by NewClient (it bounds the answers); another fails every read.
type Load struct {
	opts LoadOptions
	key  string

	snap    atomic.Pointer[Snapshot]
	changed chan struct{} // one pending wake-up for whoever applies the sums

	writes, wakeups, rounds, fetches atomic.Int64

	mu     sync.Mutex
	status LoadStatus // guarded by mu
	start  time.Time
	// delays is a ring of the last propagation delays seen (a record's
	// arrival minus its publication); guarded by mu.
	delays [maxFleetDelays]time.Duration
	nDelay int
}

// maxFleetDelays is how many propagation delays Status's percentiles are
// taken over.
const maxFleetDelays = 256

// LoadStatus is a point-in-time view for /status and metrics.
type LoadStatus struct {
	ID     string `json:"id"`
	Prefix string `json:"prefix"`
	// Stale is true when the fleet sums cannot be trusted: Consul did not
	// answer within StaleAfter, the last query or publication failed, or
	// nothing was read yet. Limits then fall back to per-edge shares.
	Stale bool `json:"stale"`
	// Age is how long ago the sums were last read (since start when never).
	Age time.Duration `json:"age_ns"`
	// Edges is the fleet size last read.
	Edges         int       `json:"edges"`
	LastRead      time.Time `json:"last_read,omitzero"`
	LastPublished time.Time `json:"last_published,omitzero"`
	Session       string    `json:"session,omitempty"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorAt   time.Time `json:"last_error_at,omitzero"`
	// Writes counts KV and session writes (create, acquire, renew); Wakeups
	// the follower's answers.
	Writes  int64 `json:"writes"`
	Wakeups int64 `json:"wakeups"`
	// Rounds counts the publisher's looks at the load, written or not.
	Rounds int64 `json:"rounds"`
	// Fetches counts the records read one by one (a key unchanged since
	// it was read, or no session holds, is not read).
	Fetches int64 `json:"fetches"`
	// Refused counts the keys of the prefix the last read refused, among
	// them: Unheld, held by no session (never read); Oversized, values
	// over MaxRecordBytes (refused unread); Excess, keys past
	// MaxKeys or records past MaxEdges (ignored). The snapshot's
	// Errors say why, for the first few.
	Refused   int `json:"refused"`
	Unheld    int `json:"unheld,omitempty"`
	Oversized int `json:"oversized,omitempty"`
	Excess    int `json:"excess,omitempty"`
	// DelayP50 and DelayP99 are percentiles of how long the last
	// publications of other edges took to arrive here (arrival on this
	// edge's clock minus publication on theirs: exact on one host, off by
	// the clock skew between hosts), over the last 256.
	DelayP50 time.Duration `json:"propagation_p50_ns"`
	DelayP99 time.Duration `json:"propagation_p99_ns"`

	readFailed, publishFailed bool
}

// NewLoad validates o and fills defaults.
func NewLoad(o LoadOptions) (*Load, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("fleet: load: consul client is required")
	case strings.Trim(o.Prefix, "/") == "":
		return nil, errors.New("fleet: load: prefix is required")
	case o.Collect == nil:
		return nil, errors.New("fleet: load: collect is required")
	}
	if err := checkFleetID(o.ID); err != nil {
		return nil, fmt.Errorf("fleet: load: %w", err)
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	fillFleetDefaults(&o)
	f := &Load{opts: o, key: o.Prefix + "/edges/" + o.ID, changed: make(chan struct{}, 1), start: o.Now()}
	f.status = LoadStatus{ID: o.ID, Prefix: o.Prefix, Stale: true}
	f.snap.Store(&Snapshot{Self: o.ID})
	return f, nil
}

func fillFleetDefaults(o *LoadOptions) {
	consul.Or(&o.PublishEvery, DefaultPublishEvery)
	consul.Or(&o.SessionTTL, DefaultSessionTTL)
	consul.Or(&o.WaitTime, DefaultLoadWaitTime)
	consul.Or(&o.StaleAfter, DefaultStaleAfter)
	consul.Or(&o.ReadInterval, DefaultReadInterval)
	consul.Or(&o.QuietInterval, o.WaitTime)
	// A record older than StaleAfter is not believed: a retry must come
	// well within it.
	consul.Or(&o.MaxBackoff, min(consul.DefaultMaxBackoff, o.StaleAfter/2))
	consul.Follow(&o.WaitTime, &o.MinBackoff, &o.MaxBackoff, &o.Logger, &o.Now)
}

// checkFleetID refuses ids that are not one plain KV key segment.
func checkFleetID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("edge id %q: want 1 to 128 characters", id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:", r)
		if !ok {
			return fmt.Errorf("edge id %q: only letters, digits, '.', '_', '-' and ':'", id)
		}
	}
	if id == "." || id == ".." {
		return fmt.Errorf("edge id %q", id)
	}
	return nil
}

// Key is the KV key of this edge's record.
func (f *Load) Key() string { return f.key }

// Snapshot returns the fleet as last read. Never nil; safe for concurrent
// use; the result must not be modified.
func (f *Load) Snapshot() *Snapshot { return f.snap.Load() }

// Changed is signalled (one pending value) when a new snapshot is
// published or the staleness may have changed.
func (f *Load) Changed() <-chan struct{} { return f.changed }

func (f *Load) notify() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Status returns the current status, Stale and Age as of now.
func (f *Load) Status() LoadStatus {
	now := f.opts.Now()
	f.mu.Lock()
	s := f.status
	start := f.start
	f.mu.Unlock()
	s.Writes, s.Wakeups, s.Rounds, s.Fetches = f.writes.Load(), f.wakeups.Load(), f.rounds.Load(), f.fetches.Load()
	if s.LastRead.IsZero() {
		s.Age = now.Sub(start)
	} else {
		s.Age = now.Sub(s.LastRead)
	}
	s.Stale = s.LastRead.IsZero() || s.readFailed || s.publishFailed || s.Age > f.opts.StaleAfter
	s.DelayP50, s.DelayP99 = f.delayPercentiles()
	return s
}

// delayPercentiles returns the 50th and 99th percentiles of the ring.
func (f *Load) delayPercentiles() (p50, p99 time.Duration) {
	f.mu.Lock()
	d := slices.Clone(f.delays[:min(f.nDelay, maxFleetDelays)])
	f.mu.Unlock()
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[(len(d)*99)/100]
}

// noteDelays records the propagation delay of every record of s that is
// newer than in old, other than this edge's own.
func (f *Load) noteDelays(old, s *Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range s.Edges {
		if r.ID == f.opts.ID {
			continue
		}
		if o, ok := old.Edge(r.ID); ok && !r.Published.After(o.Published) {
			continue
		}
		if old.Read.IsZero() {
			continue // the first answer: records published before this edge looked
		}
		f.delays[f.nDelay%maxFleetDelays] = max(s.Read.Sub(r.Published), 0)
		f.nDelay++
	}
}

// Run publishes and follows until ctx ends, then destroys the session (so
// the record goes at once) and returns nil. Errors are retried with
// backoff; they make the sums stale, never block a connection.
func (f *Load) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f.follow(ctx) }()
	go func() { defer wg.Done(); f.publish(ctx) }()
	// Staleness by age needs no event: wake whoever applies the sums when
	// the bound may have passed.
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
			f.notify()
		}
	}
}

// follow runs blocking queries on the prefix until ctx ends, starting one
// at most every ReadInterval, or QuietInterval after a read that touched
// no record.
func (f *Load) follow(ctx context.Context) {
	bo := consul.NewBackoff(f.opts.MinBackoff, f.opts.MaxBackoff)
	r := newFleetReader(f)
	var index uint64
	var last time.Time
	gap := f.opts.ReadInterval
	for ctx.Err() == nil {
		if !consul.Sleep(ctx, gap-time.Since(last)) {
			return
		}
		last = time.Now()
		next, quiet, err := f.read(ctx, r, index)
		gap = f.opts.ReadInterval
		if quiet {
			gap = f.opts.QuietInterval
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.fail(&f.status.readFailed, err)
			index = 0 // see Watcher.Run: an agent restarted has other indexes
			r.forget()
			if !consul.Sleep(ctx, bo.Next()) {
				return
			}
			continue
		}
		index = next
		bo.Reset()
	}
}

// read performs one blocking query on the prefix's keys and, when they
// changed, publishes the snapshot r makes of them; quiet is true when
// they changed but no record was read or went.
func (f *Load) read(ctx context.Context, r *fleetReader, index uint64) (next uint64, quiet bool, err error) {
	wait := f.opts.WaitTime
	qctx, cancel := context.WithTimeout(ctx, wait+wait/16+5*time.Second)
	defer cancel()
	keys, meta, err := consul.ListKeys(qctx, f.opts.Client, r.dir, MaxKeysResponse, api.QueryOptions{WaitIndex: index, WaitTime: wait})
	if err != nil {
		return 0, false, fmt.Errorf("fleet load: %w", err)
	}
	f.wakeups.Add(1)
	next, changed := consul.NextIndex(index, meta.LastIndex)
	now := f.opts.Now()
	if changed || index == 0 {
		s, n, err := r.read(qctx, keys, meta.LastIndex, now)
		if err != nil {
			return 0, false, err
		}
		quiet = index != 0 && !n.touched
		f.noteDelays(f.snap.Load(), s)
		f.snap.Store(s)
		f.mu.Lock()
		f.status.Edges = s.Size()
		f.status.Refused, f.status.Unheld, f.status.Oversized, f.status.Excess = n.refused, n.unheld, n.oversized, n.excess
		f.mu.Unlock()
	} else {
		old := *f.snap.Load()
		old.Read = now
		f.snap.Store(&old)
	}
	f.mu.Lock()
	f.status.LastRead, f.status.readFailed = now, false
	f.mu.Unlock()
	f.notify()
	return next, quiet, nil
}

// fail records an error of the follower or the publisher.
func (f *Load) fail(flag *bool, err error) {
	f.mu.Lock()
	first := !*flag
	*flag = true
	f.status.LastError, f.status.LastErrorAt = err.Error(), f.opts.Now()
	f.mu.Unlock()
	if first {
		f.opts.Logger.Warn("fleet load: consul; limits fall back to this edge's share", "err", err)
	} else {
		f.opts.Logger.Debug("fleet load: consul failed again", "err", err)
	}
	f.notify()
}

// publisher is the state of the publishing loop.
type publisher struct {
	session string
	renewed time.Time
	last    Record
	wrote   bool // last holds what the key holds
}

// publish writes this edge's record when it changed, every PublishEvery,
// and keeps its session alive, until ctx ends.
func (f *Load) publish(ctx context.Context) {
	var p publisher
	defer f.destroy(&p)
	bo := consul.NewBackoff(f.opts.MinBackoff, f.opts.MaxBackoff)
	t := time.NewTicker(f.opts.PublishEvery)
	defer t.Stop()
	for {
		delay := f.opts.PublishEvery
		if err := f.publishOnce(ctx, &p); err != nil {
			if ctx.Err() != nil {
				return
			}
			f.fail(&f.status.publishFailed, err)
			delay = min(bo.Next(), f.opts.PublishEvery)
		} else {
			bo.Reset()
		}
		t.Reset(delay)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publishOnce makes sure of the session and writes the record if it
// changed.
func (f *Load) publishOnce(ctx context.Context, p *publisher) error {
	w := (&api.WriteOptions{}).WithContext(ctx)
	now := f.opts.Now()
	if p.session != "" && now.Sub(p.renewed) >= f.opts.SessionTTL/3 {
		f.writes.Add(1)
		e, _, err := f.opts.Client.Session().Renew(p.session, w)
		switch {
		case err != nil:
			return fmt.Errorf("fleet load: renew session: %w", err)
		case e == nil:
			// Invalidated (Consul lost us longer than the TTL): the key
			// is gone with it, so start again.
			f.opts.Logger.Warn("fleet load: session expired; publishing again under a new one", "key", f.key)
			p.session, p.wrote = "", false
		default:
			p.renewed = now
		}
	}
	if p.session == "" {
		f.writes.Add(1)
		id, _, err := f.opts.Client.Session().Create(&api.SessionEntry{
			Name: "edge fleet load " + f.opts.ID, TTL: f.opts.SessionTTL.String(), Behavior: api.SessionBehaviorDelete,
			// No lock-delay: the same edge restarted takes its key at once.
			LockDelay: time.Millisecond,
		}, w)
		if err != nil {
			return fmt.Errorf("fleet load: create session: %w", err)
		}
		p.session, p.renewed, p.wrote = id, now, false
		f.mu.Lock()
		f.status.Session = id
		f.mu.Unlock()
	}
	f.rounds.Add(1)
	rec := f.opts.Collect()
	rec.ID = f.opts.ID
	if p.wrote && rec.SameLoad(p.last) {
		f.announce(p.last)
		return f.published(nil)
	}
	rec.Published = now
	v, err := EncodeRecord(rec)
	if err != nil {
		return fmt.Errorf("fleet load: %w", err)
	}
	f.writes.Add(1)
	held, _, err := f.opts.Client.KV().Acquire(&api.KVPair{Key: f.key, Value: v, Session: p.session}, w)
	switch {
	case err != nil:
		return fmt.Errorf("fleet load: consul kv %q: %w", f.key, err)
	case !held:
		return fmt.Errorf("fleet load: consul kv %q is held by another session (another edge with id %q?)", f.key, f.opts.ID)
	}
	p.last, p.wrote = rec, true
	f.announce(rec)
	return f.published(&now)
}

// announce calls Published.
func (f *Load) announce(r Record) {
	if f.opts.Published != nil {
		f.opts.Published(r)
	}
}

// published records a successful round.
func (f *Load) published(at *time.Time) error {
	f.mu.Lock()
	was := f.status.publishFailed
	f.status.publishFailed = false
	if at != nil {
		f.status.LastPublished = *at
	}
	f.mu.Unlock()
	if was {
		f.opts.Logger.Info("fleet load: publishing again")
		f.notify()
	}
	return nil
}

// destroy ends the session, which deletes the record: a stopping edge's
// numbers leave the sums at once. Its own short bound: ctx has ended.
func (f *Load) destroy(p *publisher) {
	if p.session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := f.opts.Client.Session().Destroy(p.session, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		f.opts.Logger.Warn("fleet load: destroying the session; the record goes with its TTL", "err", err)
	}
}

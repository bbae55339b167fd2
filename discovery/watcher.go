package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// Defaults for WatcherOptions.
const (
	DefaultPanicThreshold = 0.5
	DefaultPanicHold      = time.Minute
)

// Sources of a pool's current member set, as shown by Status.
const (
	SourceNone      = "none"      // nothing published yet
	SourcePersisted = "persisted" // the set saved by an earlier run
	SourceConsul    = "consul"    // a successful answer of this run
)

// Target is what a Watcher feeds: *balance.Pool.
type Target interface {
	Update([]balance.Member) error
}

var _ Target = (*balance.Pool)(nil)

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Pool   string // pool name, for logs, status and the state file; required
	Target Target // required
	Client *api.Client

	Service    string // Consul service name; required
	Tag        string // only instances carrying this tag; optional
	Datacenter string // optional; default the agent's
	Members    MemberOptions

	// WaitTime is the blocking-query wait; Consul adds up to WaitTime/16 of
	// jitter. Default DefaultWaitTime.
	WaitTime time.Duration
	// PanicThreshold is the fraction of the current members an answer must
	// keep to be applied at once (see applyPanic). 0 means
	// DefaultPanicThreshold; negative disables the threshold.
	PanicThreshold float64
	// PanicHold is how long a shrunken answer is held back before it is
	// believed. Default DefaultPanicHold.
	PanicHold time.Duration
	// MinBackoff and MaxBackoff bound the retry delay after errors.
	MinBackoff, MaxBackoff time.Duration

	// StateDir, when set, keeps the last good set in
	// StateDir/discovery-<pool>.json and restores it at start.
	StateDir string

	// OnGone, when set, is called after an update with the IDs of members
	// that left the registry for good: deregistered, or in maintenance
	// (service or node). A member whose check fails is not gone (checks
	// flap), and nothing is gone while the panic threshold holds members
	// back: a registry that suddenly empties must not look like every
	// backend leaving. It runs on the watcher's goroutine.
	OnGone func(ids []string)

	Logger   *slog.Logger
	Observer Observer
	Now      func() time.Time
}

// Status is a point-in-time view of a watcher for the admin endpoint.
type Status struct {
	Pool      string `json:"pool"`
	Service   string `json:"service"`
	Source    string `json:"source"` // SourceNone, SourcePersisted or SourceConsul
	Members   int    `json:"members"`
	LastIndex uint64 `json:"last_index"`
	// LastUpdate is when the published set last changed.
	LastUpdate time.Time `json:"last_update"`
	// LastContact is when Consul last answered successfully (including
	// "no change"); for a restored set, when it was saved.
	LastContact time.Time `json:"last_contact"`
	// Staleness is how long ago the set was last confirmed (now - LastContact).
	Staleness   time.Duration `json:"staleness_ns"`
	LastError   string        `json:"last_error,omitempty"`
	LastErrorAt time.Time     `json:"last_error_at"`
	Errors      int           `json:"consecutive_errors"`
	Panic       bool          `json:"panic"`
	PanicSince  time.Time     `json:"panic_since"`
	// PanicHeld is how many members are served only because of the panic
	// threshold (known members missing from the answer).
	PanicHeld int       `json:"panic_held"`
	Warnings  []Warning `json:"warnings,omitempty"`
}

// Watcher keeps one pool's membership in step with a Consul service.
type Watcher struct {
	opts WatcherOptions
	path string // state file, or ""

	// Owned by Run's goroutine.
	index     uint64
	base      []balance.Member // last set accepted without panic
	published []balance.Member
	listed    map[string]bool // Listed of the last answer accepted without panic
	// since is the join time of each published member (see stamp);
	// answered is set once an answer of this run has been applied.
	since    map[string]time.Time
	answered bool

	mu     sync.Mutex
	status Status
}

// NewWatcher validates opts and fills defaults.
func NewWatcher(opts WatcherOptions) (*Watcher, error) {
	switch {
	case opts.Pool == "":
		return nil, errors.New("discovery: watcher: pool name is required")
	case opts.Target == nil:
		return nil, fmt.Errorf("discovery: pool %q: target is required", opts.Pool)
	case opts.Client == nil:
		return nil, fmt.Errorf("discovery: pool %q: consul client is required", opts.Pool)
	case opts.Service == "":
		return nil, fmt.Errorf("discovery: pool %q: service is required", opts.Pool)
	case opts.PanicThreshold > 1:
		return nil, fmt.Errorf("discovery: pool %q: panic threshold %v above 1", opts.Pool, opts.PanicThreshold)
	}
	if opts.PanicThreshold == 0 {
		opts.PanicThreshold = DefaultPanicThreshold
	}
	consul.Or(&opts.PanicHold, DefaultPanicHold)
	consul.Follow(&opts.WaitTime, &opts.MinBackoff, &opts.MaxBackoff, &opts.Logger, &opts.Now)
	opts.Logger = opts.Logger.With("pool", opts.Pool, "service", opts.Service)
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	w := &Watcher{opts: opts}
	if opts.StateDir != "" {
		w.path = statePath(opts.StateDir, opts.Pool)
	}
	w.status = Status{Pool: opts.Pool, Service: opts.Service, Source: SourceNone}
	return w, nil
}

// Status returns the current status. Safe for concurrent use.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	s := w.status
	s.Warnings = append([]Warning(nil), s.Warnings...)
	w.mu.Unlock()
	if !s.LastContact.IsZero() {
		s.Staleness = w.opts.Now().Sub(s.LastContact)
	}
	return s
}

// Run restores the persisted set (if any), then follows the service with
// blocking queries until ctx ends, when it returns nil. Errors are retried
// with backoff and never change the membership. A panic inside one round is
// recovered and treated as an error of that round.
func (w *Watcher) Run(ctx context.Context) error {
	w.restore()
	bo := consul.NewBackoff(w.opts.MinBackoff, w.opts.MaxBackoff)
	for ctx.Err() == nil {
		if err := w.round(ctx); err != nil {
			if ctx.Err() != nil {
				break
			}
			w.fail(err)
			// After an error the agent may have restarted, and its index
			// may no longer be comparable with ours: an index that lands
			// exactly on ours would block until the next change, one below
			// it for a whole WaitTime. Ask without an index first.
			w.index = 0
			if !consul.Sleep(ctx, bo.Next()) {
				break
			}
			continue
		}
		bo.Reset()
	}
	return nil
}

// restore publishes the persisted set so the pool serves while Consul is
// down at start (traefik#1689, fabio#162).
func (w *Watcher) restore() {
	if w.path == "" {
		return
	}
	s, ok, err := loadSet(w.path)
	if err != nil {
		w.opts.Logger.Warn("discovery: ignoring persisted set", "err", err)
		w.opts.Observer.Error(w.opts.Pool, err)
		return
	}
	if !ok || len(s.Members) == 0 {
		return
	}
	if err := w.opts.Target.Update(s.Members); err != nil {
		err = fmt.Errorf("discovery: pool %q: restoring persisted set: %w", w.opts.Pool, err)
		w.opts.Logger.Warn("discovery: persisted set rejected", "err", err)
		w.opts.Observer.Error(w.opts.Pool, err)
		return
	}
	w.base, w.published = s.Members, s.Members
	w.listed = map[string]bool{}
	w.since = map[string]time.Time{}
	for _, m := range s.Members {
		w.listed[m.ID] = true
		w.since[m.ID] = m.Since
	}
	w.mu.Lock()
	w.status.Source = SourcePersisted
	w.status.Members = len(s.Members)
	w.status.LastUpdate = w.opts.Now()
	w.status.LastContact = s.Saved
	w.mu.Unlock()
	w.opts.Logger.Info("discovery: serving persisted set until Consul answers",
		"members", len(s.Members), "saved", s.Saved)
	w.opts.Observer.Updated(w.opts.Pool, len(s.Members))
}

// round performs one blocking query and applies its answer.
func (w *Watcher) round(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("discovery: pool %q: panic: %v", w.opts.Pool, r)
		}
	}()
	wait := w.opts.WaitTime
	w.mu.Lock()
	panicking, since := w.status.Panic, w.status.PanicSince
	w.mu.Unlock()
	if panicking {
		// Wake up when the hold ends even if Consul has no news.
		left := since.Add(w.opts.PanicHold).Sub(w.opts.Now())
		wait = max(min(wait, left), time.Second)
	}
	// Guard against a connection that hangs without an answer: Consul
	// answers a blocking query within wait + wait/16.
	qctx, cancel := context.WithTimeout(ctx, wait+wait/16+10*time.Second)
	defer cancel()
	q := (&api.QueryOptions{WaitIndex: w.index, WaitTime: wait, Datacenter: w.opts.Datacenter}).WithContext(qctx)
	// passingOnly=false: warning instances may be wanted, and Members
	// filters on the aggregated status itself.
	entries, meta, err := w.opts.Client.Health().Service(w.opts.Service, w.opts.Tag, false, q)
	if err != nil {
		return fmt.Errorf("discovery: pool %q: query service %q: %w", w.opts.Pool, w.opts.Service, err)
	}
	next, changed := consul.NextIndex(w.index, meta.LastIndex)
	if next == 0 {
		w.opts.Logger.Info("discovery: Consul index went backwards; resetting", "was", w.index, "now", meta.LastIndex)
	}
	w.index = next
	now := w.opts.Now()
	w.mu.Lock()
	w.status.LastIndex = meta.LastIndex
	w.status.LastContact = now
	w.status.LastError = ""
	w.status.Errors = 0
	w.mu.Unlock()
	if !changed && !(panicking && now.Sub(since) >= w.opts.PanicHold) {
		return nil
	}
	members, warns := Members(entries, w.opts.Members)
	return w.apply(members, Listed(entries), warns, meta.LastIndex, now)
}

// apply runs the panic threshold, publishes and persists.
func (w *Watcher) apply(members []balance.Member, listed map[string]bool, warns []Warning, index uint64, now time.Time) error {
	w.mu.Lock()
	wasPanic, since := w.status.Panic, w.status.PanicSince
	w.mu.Unlock()
	holding := !wasPanic || now.Sub(since) < w.opts.PanicHold
	d := applyPanic(w.base, members, w.opts.PanicThreshold, holding)

	switch {
	case d.panic && !wasPanic:
		since = now
		w.opts.Logger.Warn("discovery: answer drops too many members at once; keeping known members",
			"known", len(w.base), "answer", len(members), "threshold", w.opts.PanicThreshold, "hold", w.opts.PanicHold)
	case !d.panic && wasPanic:
		w.opts.Logger.Info("discovery: leaving panic mode", "members", len(members))
	}
	var gone []string
	if !d.panic {
		w.base = members
		gone = goneIDs(w.listed, listed)
		w.listed = listed
	}
	for _, wn := range warns {
		w.opts.Logger.Debug("discovery: instance skipped", "instance", wn.ID, "reason", wn.Message)
	}

	d.publish = w.stamp(d.publish, now)
	updated := !sameMembers(d.publish, w.published)
	if updated {
		if err := w.opts.Target.Update(d.publish); err != nil {
			return fmt.Errorf("discovery: pool %q: update: %w", w.opts.Pool, err)
		}
		w.published = d.publish
	}
	if len(gone) > 0 && w.opts.OnGone != nil {
		w.opts.Logger.Info("discovery: members left the registry", "ids", gone)
		w.opts.OnGone(gone)
	}
	// Status first, events second: whoever reacts to an event sees the
	// status that goes with it.
	w.mu.Lock()
	if updated {
		w.status.LastUpdate = now
	}
	w.status.Source = SourceConsul
	w.status.Members = len(d.publish)
	w.status.Panic = d.panic
	w.status.PanicSince = time.Time{}
	w.status.PanicHeld = 0
	if d.panic {
		w.status.PanicSince = since
		w.status.PanicHeld = len(d.publish) - len(members)
	}
	w.status.Warnings = warns
	w.mu.Unlock()
	if updated {
		w.opts.Logger.Info("discovery: members updated", "members", len(d.publish), "index", index, "panic", d.panic)
		w.opts.Observer.Updated(w.opts.Pool, len(d.publish))
	}

	if w.path != "" {
		// Persist what is served, so a restart serves the same.
		if err := saveSet(w.path, savedSet{Pool: w.opts.Pool, Service: w.opts.Service, Index: index, Saved: now, Members: d.publish}); err != nil {
			// The pool is up to date; only the cold-start copy is old.
			w.opts.Logger.Warn("discovery: persisting member set", "err", err)
			w.opts.Observer.Error(w.opts.Pool, err)
		}
	}
	return nil
}

// stamp returns members with their join times (balance.Member.Since,
// where slow start ramps from). Consul keeps no wall-clock time of a
// registration or of a check turning passing, only Raft indexes; but every
// edge's blocking query on the service returns the answer of the index
// that added the member within milliseconds of its commit, so the time
// that answer arrived is the same on every edge of a fleet to within that
// latency, measured on each edge's own clock. A member keeps its time for
// as long as it stays published (and across restarts, in the state file);
// one that drops out (deregistered, or its check failed) and comes back
// gets the time of the answer that brought it back. Members of the first
// answer of a run that the state file does not know joined at an unknown
// time, before this edge looked: they get none and are at full weight.
func (w *Watcher) stamp(members []balance.Member, now time.Time) []balance.Member {
	out := make([]balance.Member, len(members))
	next := make(map[string]time.Time, len(members))
	for i, m := range members {
		s, ok := w.since[m.ID]
		if !ok && w.answered {
			s = now.Round(0) // no monotonic reading: compared with ==, persisted
		}
		next[m.ID] = s // zero too: a member from the start stays one
		m.Since = s
		out[i] = m
	}
	// Published members only: one that leaves is forgotten, so its return
	// is a new join.
	w.since = next
	w.answered = true
	return out
}

// goneIDs returns the IDs listed before and not now, sorted.
func goneIDs(before, now map[string]bool) []string {
	var out []string
	for id := range before {
		if !now[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// fail records an error. The membership is left alone: an error never
// publishes anything (fabio#861, fabio#162).
func (w *Watcher) fail(err error) {
	now := w.opts.Now()
	w.mu.Lock()
	w.status.LastError = err.Error()
	w.status.LastErrorAt = now
	w.status.Errors++
	n := w.status.Errors
	w.mu.Unlock()
	if n == 1 {
		w.opts.Logger.Warn("discovery: query failed; keeping current members", "err", err)
	} else {
		w.opts.Logger.Debug("discovery: query failed again", "err", err, "consecutive", n)
	}
	w.opts.Observer.Error(w.opts.Pool, err)
}

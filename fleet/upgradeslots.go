package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// MaxUpgradeSlotsResponse bounds a Consul answer of the client UpgradeSlots
// is given (ClientOptions.MaxResponseBytes): the semaphore lists the whole
// of PREFIX/upgrade, where anyone who can write the prefix may add keys;
// an edge's own entries there are a few hundred bytes each.
const MaxUpgradeSlotsResponse = 1 << 20

// Bounds on what UpgradeSlots reads back from Consul to say who holds the
// slots: anyone who can write the prefix writes these, and an edge only
// prints them.
const (
	maxSlotLockBytes   = 64 << 10
	maxSlotHolderBytes = 1 << 10
	maxSlotHoldersShow = 8
	maxSlotHoldersRead = 64
	maxSlotHolderText  = 120
)

const (
	// upgradeSlotTTL is the TTL of the session behind a slot: renewed
	// every third of it while held or awaited, so the slot of an edge that
	// died (or froze) frees itself one to two TTLs later.
	upgradeSlotTTL = 15 * time.Second
	// upgradeSlotRound is how long one blocking wait for a slot lasts, and
	// so how often a waiting edge says it still waits.
	upgradeSlotRound = 10 * time.Second
)

// UpgradeSlotsOptions configure UpgradeSlots.
type UpgradeSlotsOptions struct {
	// Prefix is the fleet's KV prefix (consul.fleet.prefix); the
	// semaphore lives at Prefix/upgrade.
	Prefix string
	// Limit is how many edges may hold a slot at once; every edge of the
	// fleet must agree (Consul's semaphore refuses a different limit).
	Limit int
	// ID names this edge in the holders list (consul.fleet.id).
	ID string
	// PID is this process's, shown with ID.
	PID int
	// Round is one blocking wait; default 10s.
	Round time.Duration
	// Logger receives a slot's loss and failed renewals; nil means none.
	Logger *slog.Logger
	// OnLost, when set, is called (from the slot's own goroutine) each
	// time a slot is lost, after Lost counts it.
	OnLost func()
}

// UpgradeSlots paces the process upgrades of a fleet with Consul's
// semaphore (api.Semaphore, the KV recipe of Consul's "Semaphore" guide)
// at Prefix/upgrade: an edge takes a slot before it starts its new process
// and gives it back once its connections are handed over, so at most
// Limit edges hand off at once. A slot is bound to a session of its own
// (behavior delete, TTL 15 s, renewed while held), so a holder that dies
// frees it by itself. It is the upgrade.Gate of cmd/edge.
//
// A slot is lost when its session ends before release: Consul unreachable
// for longer than the session's TTL (Consul invalidates it between one and
// two TTLs after the last renewal), or the session destroyed by someone
// else. The hand-off under way cannot be undone, so the loss is logged at
// Warn and counted (Lost): another edge may then start its own upgrade.
type UpgradeSlots struct {
	c    *api.Client
	o    UpgradeSlotsOptions
	lock string // the semaphore's lock key
	log  *slog.Logger
	lost atomic.Uint64
}

// NewUpgradeSlots returns the slots of o.Prefix on c.
func NewUpgradeSlots(c *api.Client, o UpgradeSlotsOptions) *UpgradeSlots {
	o.Prefix = strings.TrimSuffix(o.Prefix, "/") + "/upgrade"
	if o.Round <= 0 {
		o.Round = upgradeSlotRound
	}
	s := &UpgradeSlots{c: c, o: o, lock: o.Prefix + "/" + api.DefaultSemaphoreKey, log: o.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// Lost counts the slots this edge held and lost before it gave them back.
func (s *UpgradeSlots) Lost() uint64 { return s.lost.Load() }

// watch reports the loss of the slot held by ss: the semaphore closes
// lost when its lock no longer lists the session.
func (s *UpgradeSlots) watch(ss *slotSession, lost <-chan struct{}) {
	ss.held.Store(true)
	ss.done.Go(func() {
		select {
		case <-ss.stop:
			return
		case <-lost:
		}
		select {
		case <-ss.stop:
			// Given back: end closes stop before it destroys the
			// session, which is what closed lost.
			return
		default:
		}
		s.slotLost(ss, "the semaphore no longer lists this edge's session")
	})
}

// slotLost logs and counts the loss of ss's slot, once.
func (s *UpgradeSlots) slotLost(ss *slotSession, why string) {
	if !ss.held.Load() {
		return
	}
	ss.lostOnce.Do(func() {
		s.lost.Add(1)
		defer func() {
			if s.o.OnLost != nil {
				s.o.OnLost()
			}
		}()
		s.log.Warn("fleet upgrade slot lost before the hand-off ended: another edge may start its upgrade now",
			"prefix", s.o.Prefix, "session", ss.id, "why", why, "ttl", upgradeSlotTTL.String())
	})
}

// slotHolder is this edge's contender entry: who holds or awaits a slot.
type slotHolder struct {
	ID    string    `json:"id"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

// ErrNoSlot is a wait for a slot that ran out of its bound.
var ErrNoSlot = errors.New("no fleet upgrade slot free")

// Acquire waits up to bound for a slot; waiting is called with who holds
// the slots when the wait begins and after every round of it. release
// gives the slot back (and ends its session); it is safe to call more than
// once. ctx ends the wait, not a slot already held.
func (s *UpgradeSlots) Acquire(ctx context.Context, bound time.Duration, waiting func(holders string)) (func(), error) {
	if waiting == nil {
		waiting = func(string) {}
	}
	value, err := json.Marshal(slotHolder{ID: s.o.ID, PID: s.o.PID, Since: time.Now().UTC()})
	if err != nil {
		return nil, fmt.Errorf("fleet upgrade slots: %w", err)
	}
	sess, err := s.newSession(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(bound)
	if n, who := s.holders(ctx); n >= s.o.Limit {
		waiting(who)
	}
	for {
		wait := min(s.o.Round, time.Until(deadline))
		if wait <= 0 {
			_, who := s.holders(ctx)
			sess.end()
			return nil, fmt.Errorf("%w within %s: held by %s", ErrNoSlot, bound, who)
		}
		lost, err := s.try(ctx, sess.id, value, wait)
		switch {
		case err != nil:
			sess.end()
			return nil, err
		case lost != nil:
			s.watch(sess, lost)
			return sess.end, nil
		case ctx.Err() != nil:
			sess.end()
			return nil, fmt.Errorf("fleet upgrade slots: %w", ctx.Err())
		}
		if time.Until(deadline) > 0 {
			_, who := s.holders(ctx)
			waiting(who)
		}
	}
}

// try is one round of the semaphore's wait: the slot's channel once held,
// nil if none came free within wait.
func (s *UpgradeSlots) try(ctx context.Context, session string, value []byte, wait time.Duration) (<-chan struct{}, error) {
	sema, err := s.c.SemaphoreOpts(&api.SemaphoreOptions{
		Prefix: s.o.Prefix, Limit: s.o.Limit, Session: session, Value: value,
		SemaphoreWaitTime: wait, SemaphoreTryOnce: true,
	})
	if err != nil {
		return nil, fmt.Errorf("fleet upgrade slots at %s: %w", s.o.Prefix, err)
	}
	stop := make(chan struct{})
	// The semaphore looks at stop between its blocking queries, each at
	// most wait long.
	unhook := context.AfterFunc(ctx, func() { close(stop) })
	defer unhook()
	lost, err := sema.Acquire(stop)
	switch {
	case err == nil:
		return lost, nil
	case strings.Contains(err.Error(), "limit conflict"), errors.Is(err, api.ErrSemaphoreConflict):
		// api.Semaphore says so only in its text.
		return nil, fmt.Errorf("fleet upgrade slots at %s: %w (every edge of the fleet must set the same upgrade.fleet_concurrency, and nothing else may write there)", s.o.Prefix, err)
	}
	return nil, fmt.Errorf("fleet upgrade slots at %s: %w", s.o.Prefix, err)
}

// slotSession is the session behind one wait or slot, renewed by its own
// goroutine until end.
type slotSession struct {
	id       string
	stop     chan struct{}
	once     sync.Once
	done     sync.WaitGroup
	held     atomic.Bool // a slot is held on it
	lostOnce sync.Once
}

// newSession creates the session of a wait and starts renewing it.
func (s *UpgradeSlots) newSession(ctx context.Context) (*slotSession, error) {
	id, _, err := s.c.Session().Create(&api.SessionEntry{
		Name: "edge upgrade " + s.o.ID, TTL: upgradeSlotTTL.String(), Behavior: api.SessionBehaviorDelete,
		LockDelay: time.Millisecond,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("fleet upgrade slots: session: %w", err)
	}
	ss := &slotSession{id: id, stop: make(chan struct{})}
	ss.done.Go(func() { s.renew(ss) })
	return ss, nil
}

// renew keeps the session alive until end, then destroys it, which frees
// a slot it held (its contender entry goes with it) even when Consul is
// slow to answer the semaphore's own release.
func (s *UpgradeSlots) renew(ss *slotSession) {
	tick := time.NewTicker(upgradeSlotTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ss.stop:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = s.c.Session().Destroy(ss.id, (&api.WriteOptions{}).WithContext(ctx))
			cancel()
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), upgradeSlotTTL/3)
			entry, _, err := s.c.Session().Renew(ss.id, (&api.WriteOptions{}).WithContext(ctx))
			cancel()
			switch {
			case err != nil:
				// Retried at the next tick: the session survives until
				// Consul has not heard of it for a TTL.
				s.log.Warn("fleet upgrade slot: session not renewed", "prefix", s.o.Prefix, "session", ss.id, "err", err)
			case entry == nil:
				// Renew answers 404, no entry, for a session Consul no
				// longer has.
				s.slotLost(ss, "consul no longer has the session (not renewed within its TTL, or destroyed)")
			}
		}
	}
}

// end stops renewing and destroys the session, once, and waits for it.
func (ss *slotSession) end() {
	ss.once.Do(func() { close(ss.stop) })
	ss.done.Wait()
}

// holders reads who holds the slots: their count and a line naming at
// most maxSlotHoldersShow of them. Everything read is bounded and made
// printable; what cannot be read is said so, not trusted.
func (s *UpgradeSlots) holders(ctx context.Context) (int, string) {
	pair, _, err := consul.GetBounded(ctx, s.c, s.lock, maxSlotLockBytes, api.QueryOptions{})
	switch {
	case err != nil:
		return 0, fmt.Sprintf("unknown (%v)", err)
	case pair == nil:
		return 0, "nobody"
	}
	var lock struct{ Holders map[string]bool }
	if err := json.Unmarshal(pair.Value, &lock); err != nil {
		return 0, fmt.Sprintf("unknown (%s: %v)", s.lock, err)
	}
	ids := make([]string, 0, len(lock.Holders))
	for id := range lock.Holders {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// A holder whose session ended stays in the lock until the next
	// acquisition prunes it: only live ones count, and at most
	// maxSlotHoldersRead are looked at (the lock is anyone's to write).
	n := 0
	var names []string
	for i, id := range ids {
		if i == maxSlotHoldersRead {
			names = append(names, fmt.Sprintf("%d more unread", len(ids)-i))
			break
		}
		name, live := s.holderName(ctx, id)
		if !live {
			continue
		}
		n++
		if len(names) < maxSlotHoldersShow {
			names = append(names, name)
		}
	}
	if n > maxSlotHoldersShow {
		names = append(names, fmt.Sprintf("%d more", n-maxSlotHoldersShow))
	}
	if len(names) == 0 {
		return 0, "nobody"
	}
	return n, strings.Join(names, ", ")
}

// holderName describes the holder of session id from its contender
// entry, bounded and printable; live is false when there is no entry (the
// session ended).
func (s *UpgradeSlots) holderName(ctx context.Context, id string) (name string, live bool) {
	if len(id) > 64 || strings.ContainsAny(id, "/") {
		return "a malformed holder", true
	}
	pair, _, err := consul.GetBounded(ctx, s.c, s.o.Prefix+"/"+id, maxSlotHolderBytes, api.QueryOptions{})
	switch {
	case err != nil:
		return "session " + id, true
	case pair == nil || pair.Session == "":
		return "", false
	}
	var h slotHolder
	if json.Unmarshal(pair.Value, &h) != nil || h.ID == "" {
		return "session " + id, true
	}
	name = printable(h.ID, maxSlotHolderText)
	if h.PID > 0 {
		name += fmt.Sprintf(" (pid %d", h.PID)
		if !h.Since.IsZero() {
			name += ", since " + h.Since.UTC().Format(time.RFC3339)
		}
		name += ")"
	}
	return name, true
}

// printable is s cut to at most n runes, every control or non-printing
// rune replaced: a holder's name goes to a terminal and a log.
func printable(s string, n int) string {
	var b strings.Builder
	for i, r := range []rune(s) {
		if i == n {
			b.WriteString("…")
			break
		}
		if !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

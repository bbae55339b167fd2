package balance

import (
	"sync"
	"sync/atomic"
	"time"
)

// backendConfig is the part of a pool's options every one of its backends
// needs. It is immutable after NewPool and shared by pointer.
type backendConfig struct {
	now      func() time.Time
	eject    EjectOptions
	maxConns int64 // 0 means unlimited
	// slowStart is the length of the ramp after a backend joins or comes
	// back; 0 turns it off.
	slowStart time.Duration
	// startUnhealthy makes new backends wait for their first passing
	// active check (fabio#393: the registry's word is not enough).
	startUnhealthy bool
	// pool is the owner, whose members the ejection cap is judged over.
	pool *Pool
	fleetCounters
}

// Backend is one member of a pool with its live state. A *Backend is stable:
// Pool.Update keeps the same pointer (and so its counters, health and
// ejection state) for as long as the member keeps its ID and Addr, so a
// connection may hold it and call Release long after the pool changed.
//
// All methods are safe for concurrent use.
type Backend struct {
	id, addr string
	idHash   uint64 // hashID(id), for rendezvous hashing
	cfg      *backendConfig

	weight       atomic.Int64 // effective: override if set, else declared
	declared     atomic.Int64 // from the file or discovery
	override     atomic.Int64 // operator's; 0 when none
	admin        atomic.Int32 // AdminState
	active       atomic.Int64
	healthy      atomic.Bool  // active health; starts true
	ejectedUntil atomic.Int64 // unix nanoseconds; 0 when not ejected
	ejections    atomic.Int64
	ejectRefused atomic.Int64 // ejections the cap or the last-available rule refused
	capped       atomic.Bool  // the last ejection due was refused; cleared by a success or an ejection
	failing      atomic.Int32 // failures currently counted; lets ReportSuccess skip the lock
	cookie       atomic.Pointer[string]
	drainBy      atomic.Int64           // unix nanoseconds; 0 when its connections are not being closed
	rampFrom     atomic.Int64           // unix nanoseconds the slow-start ramp began; 0 when at full weight
	joined       atomic.Int64           // unix nanoseconds of the latest Member.Since applied
	wasHealthy   atomic.Bool            // an active check passed once: a later pass is a return
	connShare    atomic.Int64           // this edge's share of a fleet-wide limit, plus 1; 0 when none (SetConnShare)
	version      atomic.Pointer[string] // Member.Version; nil when none
	shedUntil    atomic.Int64           // unix nanoseconds; 0 when its connections are not being moved (SetShedding)

	// Guarded by the owning pool's writer mutex.
	cookies   []string // one value per cookie key, in key order
	cookieGen uint64   // key generation cookies were computed for

	// Passive-failure accounting: a ring of the most recent failure times.
	// Only ReportFailure and ReportSuccess take fmu; Pick never does.
	fmu   sync.Mutex
	fails []int64
	fhead int
	fn    int
}

func newBackend(id, addr string, cfg *backendConfig) *Backend {
	b := &Backend{id: id, addr: addr, idHash: hashID(id), cfg: cfg}
	b.healthy.Store(!cfg.startUnhealthy)
	b.wasHealthy.Store(!cfg.startUnhealthy)
	b.weight.Store(1)
	b.declared.Store(1)
	if cfg.eject.Failures > 0 {
		b.fails = make([]int64, cfg.eject.Failures)
	}
	return b
}

// ID returns the stable identity of the member.
func (b *Backend) ID() string { return b.id }

// Addr returns the host:port of the backend.
func (b *Backend) Addr() string { return b.addr }

// Weight returns the current relative weight (>= 1).
func (b *Backend) Weight() int { return int(b.weight.Load()) }

// Active returns the number of connections currently held on the backend.
func (b *Backend) Active() int64 { return b.active.Load() }

// SetDraining records that b left its pool for good and that its live
// connections are being closed, the last of them by until. It is a mark for
// whoever closes them (a connection that was still being set up when b left
// reads it) and for status; Pick never sees b again anyway. Pool.Update
// clears it when b rejoins.
func (b *Backend) SetDraining(until time.Time) { b.drainBy.Store(max(until.UnixNano(), 1)) }

// Draining reports whether b's connections are being closed (see
// SetDraining), and by when.
func (b *Backend) Draining() (until time.Time, ok bool) {
	n := b.drainBy.Load()
	if n == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// Acquire counts one more active connection, regardless of any
// MaxConnsPerBackend limit (see TryAcquire). Release must follow.
func (b *Backend) Acquire() {
	b.active.Add(1)
	b.opened()
}

// opened counts a new connection for the pool's rate (Pool.Opened).
func (b *Backend) opened() {
	if b.cfg != nil {
		b.cfg.opened.Add(1)
	}
}

// TryAcquire counts one more active connection unless the backend is at the
// pool's MaxConnsPerBackend limit, and reports whether it did. Pick skips
// backends at their limit, but two concurrent picks can both see the last
// free slot; TryAcquire closes that race. Release must follow a true result.
func (b *Backend) TryAcquire() bool {
	limit, on := b.limit()
	if !on {
		b.Acquire()
		return true
	}
	for {
		n := b.active.Load()
		if n >= limit {
			return false
		}
		if b.active.CompareAndSwap(n, n+1) {
			b.opened()
			return true
		}
	}
}

// Release counts one fewer active connection. Each Acquire or successful
// TryAcquire is paired with exactly one Release.
func (b *Backend) Release() { b.active.Add(-1) }

// SetHealthy records the result of active health checking and reports
// whether it changed, so callers can log edges rather than levels. A pass
// after a failing check starts the slow-start ramp; the first pass of a
// backend does not, its ramp runs from when it joined (Member.Since).
func (b *Backend) SetHealthy(ok bool) (changed bool) {
	changed = b.healthy.Swap(ok) != ok
	if ok && changed && b.wasHealthy.Swap(true) {
		b.startRamp(b.now().UnixNano())
	}
	return changed
}

// Healthy reports the last active health result (true until told otherwise).
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// Available reports whether new connections may go to the backend: not
// drained or disabled by an operator, healthy, not ejected by passive
// failures, and below MaxConnsPerBackend.
func (b *Backend) Available() bool {
	if b.admin.Load() != int32(AdminReady) || !b.healthy.Load() {
		return false
	}
	if limit, on := b.limit(); on && b.active.Load() >= limit {
		return false
	}
	return !b.Ejected()
}

// CookieValue returns the sticky-cookie value naming this backend under the
// pool's current signing key: base64url of a truncated HMAC-SHA256 of the
// pool name and backend ID. It reveals neither the ID nor the address.
func (b *Backend) CookieValue() string {
	if p := b.cookie.Load(); p != nil {
		return *p
	}
	return ""
}

// Ejected reports whether passive ejection currently keeps the backend out.
// It reads one atomic and, only while an ejection is recorded, the clock.
func (b *Backend) Ejected() bool {
	until := b.ejectedUntil.Load()
	if until == 0 {
		return false
	}
	if b.now().UnixNano() < until {
		return true
	}
	// Cooldown over: clear it so later calls skip the clock.
	b.ejectedUntil.CompareAndSwap(until, 0)
	return false
}

// Ejections returns how many times passive ejection has taken the backend
// out, for metrics.
func (b *Backend) Ejections() int64 { return b.ejections.Load() }

// ReportFailure records a passive failure (dial error, refused or broken
// handshake) with no stated reason; see ReportFailureReason.
func (b *Backend) ReportFailure() { b.ReportFailureReason("") }

// ReportFailureReason records a passive failure that is the backend's own
// (refused or timed-out connect, reset or EOF before a complete response
// head, malformed or oversized head); reason names it in ejection events.
// When EjectOptions.Failures failures without a success in between fall
// within EjectOptions.Window, the backend is ejected until now+Cooldown;
// afterwards it is available again and counting starts afresh. Failures
// reported while ejected belong to the same outage and are ignored.
//
// An ejection is refused when it would take out more of the pool than
// EjectOptions.MaxPercent allows, or its last available backend: the
// failures stay counted (the oldest drops out with each new one), so the
// next failure asks again, once the cap may have room.
func (b *Backend) ReportFailureReason(reason string) {
	cfg := b.cfg
	if cfg == nil || cfg.eject.Failures <= 0 || len(b.fails) == 0 {
		return
	}
	ev, notify := b.countFailure(cfg, reason)
	if notify && cfg.pool != nil && cfg.pool.onEject != nil {
		cfg.pool.onEject(ev)
	}
}

// countFailure is ReportFailureReason under fmu; it returns the event to
// report, if any, so the callback runs without the lock.
func (b *Backend) countFailure(cfg *backendConfig, reason string) (EjectEvent, bool) {
	now := cfg.now().UnixNano()
	b.fmu.Lock()
	defer b.fmu.Unlock()
	if until := b.ejectedUntil.Load(); until != 0 && now < until {
		return EjectEvent{}, false
	}
	if w := int64(cfg.eject.Window); w > 0 {
		cutoff := now - w
		for b.fn > 0 && b.fails[b.fhead] <= cutoff {
			b.fhead = (b.fhead + 1) % len(b.fails)
			b.fn--
		}
	}
	if b.fn == len(b.fails) {
		// Full after a refused ejection: the oldest failure drops out.
		b.fhead = (b.fhead + 1) % len(b.fails)
		b.fn--
	}
	b.fails[(b.fhead+b.fn)%len(b.fails)] = now
	b.fn++
	defer func() { b.failing.Store(int32(b.fn)) }()
	if b.fn < cfg.eject.Failures {
		return EjectEvent{}, false
	}
	until := now + int64(cfg.eject.Cooldown)
	ev, ok := cfg.pool.tryEject(b, until)
	ev.Reason = reason
	if !ok {
		b.ejectRefused.Add(1)
		first := !b.capped.Swap(true)
		return ev, first
	}
	b.capped.Store(false)
	b.fhead, b.fn = 0, 0
	return ev, true
}

// clearEjection ends an ejection and forgets counted failures.
func (b *Backend) clearEjection() {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	b.ejectedUntil.Store(0)
	b.fhead, b.fn = 0, 0
	b.failing.Store(0)
	b.capped.Store(false)
}

// EjectionsRefused returns how many ejections the cap or the
// last-available rule refused, for metrics.
func (b *Backend) EjectionsRefused() int64 { return b.ejectRefused.Load() }

// ReportSuccess records a successful exchange, which resets the count of
// consecutive failures. It takes no lock when nothing is counted.
func (b *Backend) ReportSuccess() {
	if b.failing.Load() == 0 {
		return
	}
	b.capped.Store(false)
	b.fmu.Lock()
	b.fhead, b.fn = 0, 0
	b.failing.Store(0)
	b.fmu.Unlock()
}

// limit is b's connection limit on this edge and whether there is one: the
// edge's share of a fleet-wide limit when one is set (SetConnShare), else
// the pool's MaxConnsPerBackend, where 0 is none.
func (b *Backend) limit() (int64, bool) {
	if s := b.connShare.Load(); s > 0 {
		return s - 1, true
	}
	if b.cfg == nil {
		return 0, false
	}
	return b.cfg.maxConns, b.cfg.maxConns > 0
}

func (b *Backend) now() time.Time {
	if b.cfg == nil || b.cfg.now == nil {
		return time.Now()
	}
	return b.cfg.now()
}

// usable reports whether b may take this connection: available and not
// already tried for it.
func usable(b *Backend, tried []*Backend) bool {
	if !b.Available() {
		return false
	}
	for _, t := range tried {
		if t == b {
			return false
		}
	}
	return true
}

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
	// startUnhealthy makes new backends wait for their first passing
	// active check (fabio#393: the registry's word is not enough).
	startUnhealthy bool
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
	failing      atomic.Int32 // failures currently counted; lets ReportSuccess skip the lock
	cookie       atomic.Pointer[string]

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

// Acquire counts one more active connection, regardless of any
// MaxConnsPerBackend limit (see TryAcquire). Release must follow.
func (b *Backend) Acquire() { b.active.Add(1) }

// TryAcquire counts one more active connection unless the backend is at the
// pool's MaxConnsPerBackend limit, and reports whether it did. Pick skips
// backends at their limit, but two concurrent picks can both see the last
// free slot; TryAcquire closes that race. Release must follow a true result.
func (b *Backend) TryAcquire() bool {
	limit := b.limit()
	if limit <= 0 {
		b.active.Add(1)
		return true
	}
	for {
		n := b.active.Load()
		if n >= limit {
			return false
		}
		if b.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release counts one fewer active connection. Each Acquire or successful
// TryAcquire is paired with exactly one Release.
func (b *Backend) Release() { b.active.Add(-1) }

// SetHealthy records the result of active health checking and reports
// whether it changed, so callers can log edges rather than levels.
func (b *Backend) SetHealthy(ok bool) (changed bool) { return b.healthy.Swap(ok) != ok }

// Healthy reports the last active health result (true until told otherwise).
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// Available reports whether new connections may go to the backend: not
// drained or disabled by an operator, healthy, not ejected by passive
// failures, and below MaxConnsPerBackend.
func (b *Backend) Available() bool {
	if b.admin.Load() != int32(AdminReady) || !b.healthy.Load() {
		return false
	}
	if limit := b.limit(); limit > 0 && b.active.Load() >= limit {
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
// handshake). When EjectOptions.Failures failures without a success in
// between fall within EjectOptions.Window, the backend is ejected until
// now+Cooldown; afterwards it is available again and counting starts afresh.
// Failures reported while ejected belong to the same outage and are ignored.
func (b *Backend) ReportFailure() {
	cfg := b.cfg
	if cfg == nil || cfg.eject.Failures <= 0 || len(b.fails) == 0 {
		return
	}
	now := cfg.now().UnixNano()
	b.fmu.Lock()
	defer b.fmu.Unlock()
	if until := b.ejectedUntil.Load(); until != 0 && now < until {
		return
	}
	if w := int64(cfg.eject.Window); w > 0 {
		cutoff := now - w
		for b.fn > 0 && b.fails[b.fhead] <= cutoff {
			b.fhead = (b.fhead + 1) % len(b.fails)
			b.fn--
		}
	}
	b.fails[(b.fhead+b.fn)%len(b.fails)] = now
	b.fn++
	if b.fn >= cfg.eject.Failures {
		b.ejectedUntil.Store(now + int64(cfg.eject.Cooldown))
		b.ejections.Add(1)
		b.fhead, b.fn = 0, 0
	}
	b.failing.Store(int32(b.fn))
}

// ReportSuccess records a successful exchange, which resets the count of
// consecutive failures. It takes no lock when nothing is counted.
func (b *Backend) ReportSuccess() {
	if b.failing.Load() == 0 {
		return
	}
	b.fmu.Lock()
	b.fhead, b.fn = 0, 0
	b.failing.Store(0)
	b.fmu.Unlock()
}

func (b *Backend) limit() int64 {
	if b.cfg == nil {
		return 0
	}
	return b.cfg.maxConns
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

package balance

// CONTRACT STUB: the exported API below is the contract other packages code
// against. The balance implementation replaces the bodies; signatures stay.

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is how a pool chooses a backend for a new connection.
type Mode int

const (
	// LeastConn is power-of-two-choices over active connections, weighted.
	LeastConn Mode = iota
	// Cookie issues a sticky cookie naming the backend; falls back to LeastConn.
	Cookie
	// ClientIP is rendezvous hashing of the client address with bounded load.
	ClientIP
)

// ErrNoBackend is returned by Pick when no backend is available.
var ErrNoBackend = errors.New("balance: no available backend")

// Member is one backend as declared by the config file or discovery.
type Member struct {
	ID     string // stable identity; defaults to Addr when empty
	Addr   string // host:port of the plain-HTTP backend
	Weight int    // relative weight, >= 1; 0 means 1
}

// EjectOptions configure passive ejection.
type EjectOptions struct {
	Failures int           // failures within Window that eject; 0 disables
	Window   time.Duration // sliding window for counting failures
	Cooldown time.Duration // how long an ejected backend stays out
}

// CookieOptions configure sticky cookies.
type CookieOptions struct {
	Keys [][]byte // Keys[0] signs new cookies; all are accepted (rotation)
}

// PoolOptions configure a Pool.
type PoolOptions struct {
	Name               string
	Mode               Mode
	BoundedLoad        float64 // ClientIP: max load factor over the mean; default 1.25
	MaxConnsPerBackend int64   // 0 means unlimited
	Eject              EjectOptions
	Cookie             CookieOptions
	Now                func() time.Time // defaults to time.Now
}

// Backend is one member with its live state. Pointers stay valid across updates.
type Backend struct {
	id, addr string
	weight   atomic.Int64
	active   atomic.Int64
	healthy  atomic.Bool // active health (health package); starts true
	cookie   string
}

// ID returns the stable identity.
func (b *Backend) ID() string { return b.id }

// Addr returns host:port.
func (b *Backend) Addr() string { return b.addr }

// Weight returns the current weight.
func (b *Backend) Weight() int { return int(b.weight.Load()) }

// Active returns the number of connections currently held.
func (b *Backend) Active() int64 { return b.active.Load() }

// Acquire counts one more active connection. Release must follow.
func (b *Backend) Acquire() { b.active.Add(1) }

// Release counts one fewer active connection.
func (b *Backend) Release() { b.active.Add(-1) }

// SetHealthy records the active health result; reports whether it changed.
func (b *Backend) SetHealthy(ok bool) (changed bool) { return b.healthy.Swap(ok) != ok }

// Healthy reports the active health result.
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// ReportFailure records a passive failure (dial error, broken handshake).
func (b *Backend) ReportFailure() {}

// ReportSuccess records a successful exchange.
func (b *Backend) ReportSuccess() {}

// Ejected reports whether passive ejection currently keeps it out.
func (b *Backend) Ejected() bool { return false }

// Available reports whether new connections may go to it.
func (b *Backend) Available() bool { return b.Healthy() && !b.Ejected() }

// CookieValue is the sticky-cookie value naming this backend (HMAC of its id).
func (b *Backend) CookieValue() string { return b.cookie }

// Snapshot is an immutable view of a pool's members.
type Snapshot struct {
	Backends []*Backend // sorted by ID
	byCookie map[string]*Backend
}

// Request describes the connection being placed.
type Request struct {
	Cookie   string     // value of the sticky cookie sent by the client, or ""
	ClientIP netip.Addr // the client as decided by the proxy
	Tried    []*Backend // backends already tried for this connection (retries)
}

// Result is the outcome of Pick.
type Result struct {
	Backend *Backend
	// SetCookie is true when the client must be (re)issued Backend.CookieValue().
	SetCookie bool
}

// Pool holds the members of one pool.
type Pool struct {
	opts PoolOptions
	mu   sync.Mutex
	snap atomic.Pointer[Snapshot]
}

// NewPool returns an empty pool.
func NewPool(opts PoolOptions) (*Pool, error) {
	p := &Pool{opts: opts}
	p.snap.Store(&Snapshot{byCookie: map[string]*Backend{}})
	return p, nil
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.opts.Name }

// Update replaces the membership with the full list; backends keep identity by ID.
func (p *Pool) Update(members []Member) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.snap.Load()
	prev := map[string]*Backend{}
	for _, b := range old.Backends {
		prev[b.id] = b
	}
	s := &Snapshot{byCookie: map[string]*Backend{}}
	for _, m := range members {
		id := m.ID
		if id == "" {
			id = m.Addr
		}
		b := prev[id]
		if b == nil || b.addr != m.Addr {
			b = &Backend{id: id, addr: m.Addr, cookie: id}
			b.healthy.Store(true)
		}
		w := m.Weight
		if w < 1 {
			w = 1
		}
		b.weight.Store(int64(w))
		s.Backends = append(s.Backends, b)
		s.byCookie[b.cookie] = b
	}
	p.snap.Store(s)
	return nil
}

// Snapshot returns the current immutable view.
func (p *Pool) Snapshot() *Snapshot { return p.snap.Load() }

// Pick chooses a backend. It takes no lock and does not allocate.
func (p *Pool) Pick(req *Request) (Result, error) {
	s := p.snap.Load()
	if b := s.byCookie[req.Cookie]; b != nil && b.Available() && !tried(req.Tried, b) {
		return Result{Backend: b}, nil
	}
	var best *Backend
	for _, b := range s.Backends {
		if !b.Available() || tried(req.Tried, b) {
			continue
		}
		if best == nil || b.Active() < best.Active() {
			best = b
		}
	}
	if best == nil {
		return Result{}, ErrNoBackend
	}
	return Result{Backend: best, SetCookie: p.opts.Mode == Cookie}, nil
}

func tried(list []*Backend, b *Backend) bool {
	for _, t := range list {
		if t == b {
			return true
		}
	}
	return false
}

// Limiter enforces per-client-IP connection counts and new-connection rates.
type Limiter struct{}

// LimiterOptions configure a Limiter. Zero values disable each limit.
type LimiterOptions struct {
	MaxConnsPerIP int     // concurrent connections per client IP
	Rate          float64 // new connections per second per client IP
	Burst         int     // token-bucket burst
	Now           func() time.Time
}

// NewLimiter returns a Limiter.
func NewLimiter(opts LimiterOptions) *Limiter { return &Limiter{} }

// Admit decides whether a new connection from ip may proceed. When ok is
// false, retryAfter says when to try again (0 when the reason is a
// concurrency limit). When ok is true the caller must call Done(ip) later.
func (l *Limiter) Admit(ip netip.Addr) (ok bool, retryAfter time.Duration) { return true, 0 }

// Done releases one connection of ip admitted earlier.
func (l *Limiter) Done(ip netip.Addr) {}

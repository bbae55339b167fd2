package balance

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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

// String returns the configuration spelling of m ("least_conn", "cookie",
// "client_ip").
func (m Mode) String() string {
	switch m {
	case LeastConn:
		return "least_conn"
	case Cookie:
		return "cookie"
	case ClientIP:
		return "client_ip"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode is the inverse of Mode.String; "" means LeastConn.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "least_conn":
		return LeastConn, nil
	case "cookie":
		return Cookie, nil
	case "client_ip":
		return ClientIP, nil
	}
	return 0, fmt.Errorf("balance: mode %q: want least_conn, cookie or client_ip", s)
}

// ErrNoBackend is returned by Pick when no backend is available.
var ErrNoBackend = errors.New("balance: no available backend")

// ErrInvalidMember is wrapped by the errors Update returns for a bad member
// list; the pool then keeps its previous membership.
var ErrInvalidMember = errors.New("invalid member")

// MaxWeight is the largest weight a Member may have. It keeps the weighted
// comparisons of Pick in exact integer arithmetic.
const MaxWeight = 1_000_000

// MinCookieKeyLen is the shortest accepted cookie key, in bytes.
const MinCookieKeyLen = 16

// DefaultBoundedLoad is the ClientIP load factor used when
// PoolOptions.BoundedLoad is zero.
const DefaultBoundedLoad = 1.25

// DefaultMinExcess is the ClientIP floor used when PoolOptions.MinExcess is
// zero: a backend is passed over only once it carries more than this many
// connections beyond its weighted share. 64 lets one address (a NATed
// office, a browser with several tabs) hold dozens of connections on a
// near-idle pool without spilling, and is far above what the hash's own
// unevenness puts on a backend before the factor takes over (a share of
// 256 connections, where 25% of it is 64), so edges of a fleet, each seeing
// only its own counts, agree on every address under normal load.
const DefaultMinExcess = 64

// NoMinExcess, as PoolOptions.MinExcess, leaves the bound to the factor
// alone (the bound of Mirrokni et al.).
const NoMinExcess = -1

// DefaultEjectCooldown is used when EjectOptions.Failures is set and
// Cooldown is zero.
const DefaultEjectCooldown = 30 * time.Second

// DefaultMaxEjectionPercent is used when EjectOptions.MaxPercent is zero.
// Envoy's max_ejection_percent defaults to 10, which in the pools of two to
// five WebSocket backends edge usually serves still ejects one (Envoy ejects
// at least one host whatever the share); 50 lets half a small pool go while
// the other half always stays, so no run of failures, whoever caused them,
// can empty a pool.
const DefaultMaxEjectionPercent = 50

// Member is one backend as declared by the config file or discovery.
type Member struct {
	ID     string // stable identity; defaults to Addr when empty
	Addr   string // host:port of the plain-HTTP backend
	Weight int    // relative weight, 1..MaxWeight; 0 means 1
	// Since is when the member joined the registry (or rejoined it after a
	// failing check), as every edge learns it from the same answer: the
	// slow-start ramp (PoolOptions.SlowStart) runs from it, so every edge
	// ramps the member alike whenever it noticed. Zero means no ramp for
	// joining (present from the start, or a member of the file).
	Since time.Time `json:",omitzero"`
	// Version is what the member runs, as its registration or the file
	// says ("" when neither does): a canary (Canary) splits connections by
	// it. At most MaxVersionLen printable bytes.
	Version string `json:",omitempty"`
}

// EjectOptions configure passive ejection.
type EjectOptions struct {
	Failures int           // failures within Window that eject; 0 disables
	Window   time.Duration // sliding window for counting failures; 0 counts consecutive failures at any distance
	Cooldown time.Duration // how long an ejected backend stays out; 0 means DefaultEjectCooldown
	// MaxPercent caps the share of the pool's members ejected at once,
	// 1..100; 0 means DefaultMaxEjectionPercent. Like Envoy's
	// max_ejection_percent, one member may always be ejected in a pool of
	// two or more; unlike it, the last available member never is.
	MaxPercent int
}

// EjectEvent describes an ejection, or one refused by the cap, for the
// pool's OnEject callback.
type EjectEvent struct {
	Pool    string
	Backend *Backend
	Reason  string    // of the failure that reached the threshold; may be ""
	Until   time.Time // end of the ejection; zero when Refused
	// Refused is set when the cap or the last-available rule kept the
	// backend in. Only the first refusal of a run is reported (until the
	// backend succeeds or is ejected); EjectionsRefused counts them all.
	Refused bool
	Ejected int // members of the pool ejected after this event
	Max     int // members the cap allows ejected at once
}

// CookieOptions configure sticky cookies.
type CookieOptions struct {
	// Keys[0] signs new cookies; values made with any key are accepted so a
	// key can be rotated without losing stickiness (put the new key first,
	// keep the old one second for at least a cookie lifetime). Each key must
	// be at least MinCookieKeyLen bytes.
	//
	// With no keys, NewPool generates a random one: cookies then do not
	// survive a restart and differ between the edges of a fleet, so
	// stickiness across a fleet needs a shared, configured key.
	Keys [][]byte
}

// PoolOptions configure a Pool.
type PoolOptions struct {
	Name string // names the pool in errors; also binds cookie values to the pool
	// Mode is how Pick chooses; see Pick for the order of choice.
	Mode Mode
	// BoundedLoad is the ClientIP load factor: a backend is skipped while
	// its active connections reach BoundedLoad times its weighted share of
	// the pool's connections (consistent hashing with bounded loads,
	// Mirrokni, Thorup and Zadimoghaddam 2016), and also its share plus
	// MinExcess. 0 means DefaultBoundedLoad; otherwise
	// it must be >= 1, and math.Inf(1) disables the bound.
	BoundedLoad float64
	// MinExcess is the floor under the ClientIP load bound: a backend is
	// passed over only when its active connections would exceed both
	// BoundedLoad times its weighted share and its share plus MinExcess.
	// It keeps a lightly loaded pool from spilling one client's own
	// connections. 0 means DefaultMinExcess; NoMinExcess (any negative
	// value) means none.
	MinExcess          int64
	MaxConnsPerBackend int64 // 0 means unlimited
	// SlowStart is how long a backend's weight ramps from a tenth to all of
	// it after the backend joins (from Member.Since), comes back from
	// passive ejection (from the ejection's end) or passes an active check
	// again after failing. It applies to every mode: least-connections and
	// the cookie mode's placements compare the ramped weight, client_ip
	// hashes and bounds with it. 0 turns it off.
	SlowStart time.Duration
	// Eject configures passive ejection on failures seen on real traffic.
	Eject EjectOptions
	// OnEject, when set, is called for every ejection and for the first
	// refused one of a run, on the goroutine that reported the failure and
	// without any lock of the pool held. It must not block.
	OnEject func(EjectEvent)
	// Cookie holds the sticky-cookie signing keys (Mode Cookie).
	Cookie CookieOptions
	// Fleet is the layer of the fleet's settings on the pools of this
	// name (Layer), shared by every pool built with it across reloads;
	// nil gives the pool an empty one of its own.
	Fleet *Layer
	Now   func() time.Time // defaults to time.Now; used for ejection
	// StartUnhealthy makes every new backend unavailable until something
	// (the active health checker) calls SetHealthy(true): with active
	// checks configured, a backend is never sent clients before it has
	// been seen healthy.
	StartUnhealthy bool
}

// Snapshot is an immutable view of a pool's members. It and its Backends
// slice must not be modified.
type Snapshot struct {
	Backends []*Backend // sorted by ID
	byCookie map[string]cookieEntry
}

// cookieEntry is what a cookie value names: the backend, and whether the
// value was made with the primary key (if not, the client gets a fresh one).
type cookieEntry struct {
	b       *Backend
	primary bool
}

// ByID returns the backend with the given ID, or nil.
func (s *Snapshot) ByID(id string) *Backend {
	i, ok := slices.BinarySearchFunc(s.Backends, id, func(b *Backend, id string) int { return cmp.Compare(b.id, id) })
	if !ok {
		return nil
	}
	return s.Backends[i]
}

// Pool holds the members of one pool and picks among them. Pick and
// Snapshot never lock; Update and SetCookieKeys serialise on a writer mutex
// and publish a new Snapshot atomically.
type Pool struct {
	name        string
	mode        Mode
	boundedLoad float64
	minExcess   int64    // >= 0
	built       settings // what NewPool was given, for SameSettings
	cfg         *backendConfig
	rand        func() uint64 // lock-free, allocation-free; replaced in tests
	onEject     func(EjectEvent)
	ejmu        sync.Mutex // serialises ejection decisions against the cap

	mu      sync.Mutex // serialises writers
	keys    [][]byte   // guarded by mu
	keyGen  uint64     // guarded by mu; bumped when keys change
	retired map[retiredKey]*Backend
	// layers are the operators' settings by member ID, one per scope,
	// from construction (Layer); read under mu.
	layers [numScopes]*Layer

	snap atomic.Pointer[Snapshot]
	// canary is the layers' canary in force (applyCanary), or nil.
	canary atomic.Pointer[Canary]
}

// retiredKey names a removed backend that still holds connections, so that
// a member flapping out and back in (a registry hiccup) keeps its counters.
type retiredKey struct{ id, addr string }

// settings are the options fixed when a pool is built, with their
// defaults applied: a running pool cannot change them, since its backends'
// counters and the hash depend on them.
type settings struct {
	mode        Mode
	boundedLoad float64
	minExcess   int64 // >= 0
	maxConns    int64
	slowStart   time.Duration
	eject       EjectOptions
}

// settings validates the build-time options and applies their defaults.
func (opts PoolOptions) settings() (settings, []error) {
	var errs []error
	if opts.Mode < LeastConn || opts.Mode > ClientIP {
		errs = append(errs, fmt.Errorf("mode %d unknown", int(opts.Mode)))
	}
	bl := opts.BoundedLoad
	switch {
	case bl == 0:
		bl = DefaultBoundedLoad
	case math.IsNaN(bl) || bl < 1:
		errs = append(errs, fmt.Errorf("bounded load %v: must be >= 1", opts.BoundedLoad))
	}
	minExcess := opts.MinExcess
	switch {
	case minExcess == 0:
		minExcess = DefaultMinExcess
	case minExcess < 0:
		minExcess = 0
	}
	if opts.MaxConnsPerBackend < 0 {
		errs = append(errs, fmt.Errorf("max connections per backend %d: must be >= 0", opts.MaxConnsPerBackend))
	}
	if opts.SlowStart < 0 {
		errs = append(errs, fmt.Errorf("slow start %v: must be >= 0", opts.SlowStart))
	}
	ej, err := opts.Eject.withDefaults()
	if err != nil {
		errs = append(errs, err)
	}
	return settings{mode: opts.Mode, boundedLoad: bl, minExcess: minExcess, maxConns: opts.MaxConnsPerBackend, slowStart: opts.SlowStart, eject: ej}, errs
}

// withDefaults validates e and applies its defaults.
func (e EjectOptions) withDefaults() (EjectOptions, error) {
	var errs []error
	if e.Failures < 0 || e.Window < 0 || e.Cooldown < 0 || e.MaxPercent < 0 {
		errs = append(errs, fmt.Errorf("passive ejection %+v: values must be >= 0", e))
	}
	if e.MaxPercent > 100 {
		errs = append(errs, fmt.Errorf("passive ejection max percent %d: must be at most 100", e.MaxPercent))
	}
	if e.MaxPercent == 0 {
		e.MaxPercent = DefaultMaxEjectionPercent
	}
	if e.Failures > 0 && e.Cooldown == 0 {
		e.Cooldown = DefaultEjectCooldown
	}
	return e, errors.Join(errs...)
}

// NewPool validates opts and returns an empty pool.
func NewPool(opts PoolOptions) (*Pool, error) {
	set, errs := opts.settings()
	keys, err := copyKeys(opts.Cookie.Keys)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("balance: pool %q: %w", opts.Name, errors.Join(errs...))
	}
	if len(keys) == 0 {
		keys = [][]byte{randomKey()}
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	p := &Pool{
		name:        opts.Name,
		mode:        set.mode,
		boundedLoad: set.boundedLoad,
		minExcess:   set.minExcess,
		built:       set,
		cfg:         &backendConfig{now: now, eject: set.eject, maxConns: set.maxConns, slowStart: set.slowStart, startUnhealthy: opts.StartUnhealthy},
		rand:        rand.Uint64,
		onEject:     opts.OnEject,
		keys:        keys,
		keyGen:      1,
		retired:     map[retiredKey]*Backend{},
	}
	p.layers[Local], p.layers[Fleet] = NewLayer(), opts.Fleet
	if p.layers[Fleet] == nil {
		p.layers[Fleet] = NewLayer()
	}
	for _, l := range p.layers {
		l.join(p)
	}
	p.applyCanary()
	p.cfg.pool = p
	p.snap.Store(&Snapshot{byCookie: map[string]cookieEntry{}})
	return p, nil
}

// SameSettings reports whether p, already running, can serve for opts:
// whether the settings fixed at build (Mode, BoundedLoad, MinExcess,
// MaxConnsPerBackend, SlowStart, Eject, defaults applied) are the same. A reload
// keeps a running pool rather than replace it, so live connections keep
// their *Backend and least-connections keeps its counts (traefik#13913);
// when SameSettings is false the new settings wait for a restart. Name,
// OnEject, Cookie keys (SetCookieKeys), Now and StartUnhealthy are not
// compared.
func (p *Pool) SameSettings(opts PoolOptions) bool {
	set, errs := opts.settings()
	return len(errs) == 0 && set == p.built
}

// MaxEjectionPercent returns the share of members the pool may eject at
// once (EjectOptions.MaxPercent with its default applied).
func (p *Pool) MaxEjectionPercent() int { return p.cfg.eject.MaxPercent }

// MaxEjected returns how many of the current members may be ejected at
// once: MaxEjectionPercent of them rounded down, at least one in a pool of
// two or more (as Envoy), none in a pool of one.
func (p *Pool) MaxEjected() int {
	return maxEjected(len(p.Snapshot().Backends), p.cfg.eject.MaxPercent)
}

// Ejected returns how many current members passive ejection keeps out.
func (p *Pool) Ejected() int {
	n := 0
	for _, b := range p.Snapshot().Backends {
		if b.Ejected() {
			n++
		}
	}
	return n
}

func maxEjected(members, pct int) int {
	if members < 2 {
		return 0
	}
	return max(members*pct/100, 1)
}

// tryEject ejects b until the given time unless that would exceed the cap
// or leave no other member available. The decision and the store happen
// under ejmu, so two backends failing together cannot both take the last
// slot of the cap. A backend no longer in the snapshot (removed, still
// holding connections) takes nobody's place and is ejected freely; if it
// rejoins, Update clears that ejection, so it cannot return past the cap.
func (p *Pool) tryEject(b *Backend, until int64) (EjectEvent, bool) {
	p.ejmu.Lock()
	defer p.ejmu.Unlock()
	backends := p.Snapshot().Backends
	limit := maxEjected(len(backends), p.cfg.eject.MaxPercent)
	ejected, others, member := 0, 0, false
	for _, o := range backends {
		switch {
		case o == b:
			member = true
		case o.Ejected():
			ejected++
		case o.Healthy():
			others++
		}
	}
	ev := EjectEvent{Pool: p.name, Backend: b, Ejected: ejected, Max: limit}
	if member && (ejected >= limit || others == 0) {
		ev.Refused = true
		return ev, false
	}
	b.ejectedUntil.Store(until)
	b.ejections.Add(1)
	// Back at until with no connections: ramp from there.
	b.startRamp(until)
	ev.Until = time.Unix(0, until)
	if member {
		ev.Ejected++
	}
	return ev, true
}

func copyKeys(in [][]byte) ([][]byte, error) {
	out := make([][]byte, 0, len(in))
	for i, k := range in {
		if len(k) < MinCookieKeyLen {
			return nil, fmt.Errorf("cookie key %d: %d bytes, want at least %d", i, len(k), MinCookieKeyLen)
		}
		out = append(out, slices.Clone(k))
	}
	return out, nil
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Mode returns how the pool picks.
func (p *Pool) Mode() Mode { return p.mode }

// Snapshot returns the current immutable view.
func (p *Pool) Snapshot() *Snapshot { return p.snap.Load() }

// Update replaces the membership with the full list members. A backend keeps
// its *Backend (and so its active count, health and ejection state) while
// its ID and Addr stay the same; a changed Addr makes a new Backend. On any
// invalid member (empty Addr, duplicate ID, weight out of range) Update
// returns an error naming every bad member and the pool keeps its previous
// membership.
func (p *Pool) Update(members []Member) error {
	_, err := p.UpdateLeft(members)
	return err
}

// UpdateLeft is Update that also returns the backends that left: members of
// the previous set that are not in the new one under the same ID and Addr
// (a changed Addr is a new Backend, and the old one left). What becomes of
// their live connections is the caller's decision: a member that drops out
// because a check fails is not the same as one that was removed.
func (p *Pool) UpdateLeft(members []Member) (left []*Backend, err error) {
	type norm struct {
		id, addr string
		w        int64
		since    time.Time
		version  string
	}
	list := make([]norm, 0, len(members))
	seen := make(map[string]int, len(members))
	var errs []error
	for i, m := range members {
		id := m.ID
		if id == "" {
			id = m.Addr
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("member %d (id %q): %w: %s", i, id, ErrInvalidMember, fmt.Sprintf(format, args...)))
		}
		switch {
		case m.Addr == "":
			bad("empty address")
			continue
		case m.Weight < 0 || m.Weight > MaxWeight:
			bad("weight %d out of range 0..%d", m.Weight, MaxWeight)
			continue
		case CheckVersion(m.Version) != nil:
			bad("%v", CheckVersion(m.Version))
			continue
		}
		if j, dup := seen[id]; dup {
			bad("duplicate id, first used by member %d", j)
			continue
		}
		seen[id] = i
		w := int64(m.Weight)
		if w == 0 {
			w = 1
		}
		list = append(list, norm{id, m.Addr, w, m.Since, m.Version})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("balance: pool %q: %w", p.name, errors.Join(errs...))
	}
	slices.SortFunc(list, func(a, b norm) int { return cmp.Compare(a.id, b.id) })

	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.snap.Load()
	prev := make(map[string]*Backend, len(old.Backends))
	for _, b := range old.Backends {
		prev[b.id] = b
	}
	backends := make([]*Backend, 0, len(list))
	kept := make(map[*Backend]bool, len(list))
	for _, m := range list {
		b := prev[m.id]
		if b == nil || b.addr != m.addr {
			rk := retiredKey{m.id, m.addr}
			if b = p.retired[rk]; b != nil {
				delete(p.retired, rk)
				b.drainBy.Store(0) // back before its clients were all closed
				// Ejected while it was out, it took nobody's place under
				// the cap (tryEject); it returns as a new member would.
				b.clearEjection()
			} else {
				b = newBackend(m.id, m.addr, p.cfg)
			}
		}
		b.applyOverride(p.override(m.id), m.w)
		b.noteJoined(m.since)
		b.setVersion(m.version)
		kept[b] = true
		backends = append(backends, b)
	}
	for _, b := range old.Backends {
		if kept[b] {
			continue
		}
		left = append(left, b)
		if b.Active() > 0 {
			p.retired[retiredKey{b.id, b.addr}] = b
		}
	}
	for k, b := range p.retired {
		if b.Active() <= 0 {
			delete(p.retired, k)
		}
	}
	p.publish(backends)
	return left, nil
}

// Retired returns the backends that left the pool but still hold
// connections, sorted by ID and Addr: they are in no Snapshot, yet their
// clients are live and count.
func (p *Pool) Retired() []*Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*Backend
	for _, b := range p.retired {
		if b.Active() > 0 {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *Backend) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.addr, b.addr)) })
	return out
}

// SetCookieKeys replaces the cookie keys (see CookieOptions.Keys) without
// touching membership or counters, for a configuration reload. An empty
// list is rejected: a random key would break every client's stickiness.
func (p *Pool) SetCookieKeys(keys [][]byte) error {
	k, err := copyKeys(keys)
	if err == nil && len(k) == 0 {
		err = errors.New("no cookie keys")
	}
	if err != nil {
		return fmt.Errorf("balance: pool %q: %w", p.name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = k
	p.keyGen++
	p.publish(p.snap.Load().Backends)
	return nil
}

// publish builds and stores a snapshot of backends (sorted by ID). Callers
// hold p.mu.
func (p *Pool) publish(backends []*Backend) {
	byCookie := make(map[string]cookieEntry, len(backends)*len(p.keys))
	for _, b := range backends {
		if b.cookieGen != p.keyGen {
			b.cookies = make([]string, len(p.keys))
			for i, k := range p.keys {
				b.cookies[i] = cookieValue(k, p.name, b.id)
			}
			b.cookieGen = p.keyGen
			b.cookie.Store(&b.cookies[0])
		}
		for i, v := range b.cookies {
			if _, taken := byCookie[v]; i == 0 || !taken {
				byCookie[v] = cookieEntry{b: b, primary: i == 0}
			}
		}
	}
	p.snap.Store(&Snapshot{Backends: backends, byCookie: byCookie})
}

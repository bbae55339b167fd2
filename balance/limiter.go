package balance

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

// limiterShards spreads client addresses over independently locked maps so
// that admission from many clients does not serialise on one mutex.
const limiterShards = 64

// minSweep is the map size below which a shard is never swept.
const minSweep = 64

// LimiterOptions configure a Limiter. Zero values disable each limit.
type LimiterOptions struct {
	MaxConnsPerIP int     // concurrent connections per client IP
	Rate          float64 // new connections per second per client IP
	Burst         int     // token-bucket burst; 0 means max(1, ceil(Rate))
	// IPv6PrefixLen groups IPv6 clients by prefix, since one subscriber
	// commonly holds a whole /64 and could otherwise dodge per-IP limits by
	// changing addresses. 0 means 64; 128 limits each address on its own.
	IPv6PrefixLen int
	Now           func() time.Time // defaults to time.Now
}

// Limiter enforces per-client-IP concurrent connection caps and
// new-connection rates (a token bucket per client). State is kept only for
// clients that hold connections or whose bucket is not yet full again, so
// memory follows the current load, not the number of clients ever seen.
// A nil *Limiter admits everything. Methods are safe for concurrent use.
type Limiter struct {
	maxConns int
	rate     float64
	burst    float64
	v6bits   int
	now      func() time.Time
	shards   [limiterShards]limiterShard
}

type limiterShard struct {
	mu      sync.Mutex
	m       map[netip.Addr]clientState
	sweepAt int // sweep idle entries when len(m) reaches this
}

// clientState is one client's connections and token bucket.
type clientState struct {
	conns  int
	tokens float64
	last   int64 // unix nanoseconds of the last refill
}

// NewLimiter returns a Limiter. Negative or NaN limits are treated as zero
// (disabled).
func NewLimiter(opts LimiterOptions) *Limiter {
	e := opts.effective()
	l := &Limiter{maxConns: e.maxConns, rate: e.rate, burst: e.burst, v6bits: e.v6bits, now: opts.Now}
	if l.now == nil {
		l.now = time.Now
	}
	for i := range l.shards {
		l.shards[i].m = map[netip.Addr]clientState{}
		l.shards[i].sweepAt = minSweep
	}
	return l
}

// limits are the values a Limiter enforces for its options, defaults
// applied.
type limits struct {
	maxConns    int
	rate, burst float64
	v6bits      int
}

// effective applies NewLimiter's defaults and bounds to o.
func (o LimiterOptions) effective() limits {
	e := limits{maxConns: max(o.MaxConnsPerIP, 0), v6bits: o.IPv6PrefixLen}
	if o.Rate > 0 && !math.IsInf(o.Rate, 1) {
		e.rate = o.Rate
		e.burst = float64(o.Burst)
		if o.Burst <= 0 {
			e.burst = max(1, math.Ceil(o.Rate))
		}
	}
	if e.v6bits <= 0 || e.v6bits > 128 {
		e.v6bits = 64
	}
	return e
}

// Equal reports whether a Limiter built from o enforces the same limits as
// one built from p, defaults applied (Burst 0 and Burst ceil(Rate) are the
// same bucket; so are IPv6PrefixLen 0 and 64). A reload keeps the running
// Limiter, and with it every client's count and bucket, exactly when the
// new options are Equal to the old. The clock (Now) is not a limit and is
// not compared.
func (o LimiterOptions) Equal(p LimiterOptions) bool { return o.effective() == p.effective() }

// Admit decides whether a new connection from ip may proceed. When ok is
// false, retryAfter says when to try again (0 when the reason is a
// concurrency limit; otherwise the time until the next token, rounded up to
// whole seconds, at least 1s, fit for a Retry-After header). When ok is true
// the caller must call Done(ip) later.
func (l *Limiter) Admit(ip netip.Addr) (ok bool, retryAfter time.Duration) {
	if l == nil || (l.maxConns == 0 && l.rate == 0) {
		return true, 0
	}
	key, sh := l.shardOf(ip)
	now := l.now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, found := sh.m[key]
	if !found {
		if len(sh.m) >= sh.sweepAt {
			l.sweep(sh, now)
		}
		st = clientState{tokens: l.burst, last: now}
	}
	if l.maxConns > 0 && st.conns >= l.maxConns {
		return false, 0
	}
	if l.rate > 0 {
		l.refill(&st, now)
		if st.tokens < 1 {
			sh.m[key] = st
			wait := math.Ceil((1 - st.tokens) / l.rate)
			return false, time.Duration(max(wait, 1)) * time.Second
		}
		st.tokens--
	}
	if l.maxConns > 0 {
		st.conns++
	}
	sh.m[key] = st
	return true, 0
}

// shardOf is ip's key (its address or prefix) and the shard that holds it.
func (l *Limiter) shardOf(ip netip.Addr) (netip.Addr, *limiterShard) {
	key := l.key(ip)
	return key, &l.shards[hashAddr(key)%limiterShards]
}

// Done releases one connection of ip admitted earlier.
func (l *Limiter) Done(ip netip.Addr) {
	if l == nil || l.maxConns == 0 {
		return
	}
	key, sh := l.shardOf(ip)
	now := l.now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, found := sh.m[key]
	if !found {
		return
	}
	if st.conns > 0 {
		st.conns--
	}
	if l.idle(&st, now) {
		delete(sh.m, key)
		return
	}
	sh.m[key] = st
}

// key normalises ip: IPv4-mapped addresses count as IPv4, zones are
// dropped, and IPv6 is grouped by prefix.
func (l *Limiter) key(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() && l.v6bits < 128 {
		if p, err := ip.Prefix(l.v6bits); err == nil {
			return p.Addr()
		}
	}
	return ip
}

func (l *Limiter) refill(st *clientState, now int64) {
	if l.rate == 0 {
		return
	}
	if d := now - st.last; d > 0 {
		st.tokens = min(l.burst, st.tokens+float64(d)/float64(time.Second)*l.rate)
		st.last = now
	}
}

// idle reports whether st holds nothing worth remembering: no connections
// and a full bucket (a fresh entry would be identical).
func (l *Limiter) idle(st *clientState, now int64) bool {
	if st.conns > 0 {
		return false
	}
	l.refill(st, now)
	return l.rate == 0 || st.tokens >= l.burst
}

// sweep drops idle entries of sh, which the caller holds locked. It runs
// when the map has doubled since the last sweep, so its cost is amortised
// over the inserts that grew the map.
func (l *Limiter) sweep(sh *limiterShard, now int64) {
	for k, st := range sh.m {
		if l.idle(&st, now) {
			delete(sh.m, k)
		}
	}
	sh.sweepAt = max(2*len(sh.m), minSweep)
}

// Hold counts one connection of ip that was admitted elsewhere (by the
// edge process that handed it over), whatever the limit and without a
// rate token: it is already open, and refusing it now would close it.
// Done(ip) must follow, as after Admit.
func (l *Limiter) Hold(ip netip.Addr) {
	if l == nil || l.maxConns == 0 {
		return
	}
	key, sh := l.shardOf(ip)
	now := l.now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, found := sh.m[key]
	if !found {
		st = clientState{tokens: l.burst, last: now}
	}
	st.conns++
	sh.m[key] = st
}

package balance

import (
	"math"
	"math/bits"
	"net/netip"
)

// Pick chooses a backend for one connection. It loads the snapshot once,
// takes no lock and does not allocate. It skips backends that are not
// Available or are listed in req.Tried, and returns ErrNoBackend when none
// is left. Pick does not count the connection: the caller calls
// TryAcquire (or Acquire) on the result and Release when done.
//
// The order of choice:
//  1. Mode Cookie: the backend named by req.Cookie, if the value is exactly
//     one the pool issued under one of its keys and the backend is usable.
//     SetCookie is set when the value came from an older key, when the
//     client sent none or an unknown one, when its backend is gone, and
//     when its connections are being moved off it (Backend.SetShedding).
//  2. Mode ClientIP: weighted rendezvous hashing of req.ClientIP with
//     bounded load (see PoolOptions.BoundedLoad and MinExcess).
//  3. Otherwise, and as the fallback for both: power-of-two-choices
//     least-connections, comparing (Active+1)/Weight.
func (p *Pool) Pick(req *Request) (Result, error) {
	var empty Request
	if req == nil {
		req = &empty
	}
	s := p.snap.Load()
	switch p.mode {
	case Cookie:
		if len(req.Cookie) == cookieLen {
			if e, ok := s.byCookie[req.Cookie]; ok && usable(e.b, req.Tried) && !e.b.Shedding() {
				return Result{Backend: e.b, SetCookie: !e.primary}, nil
			}
		}
		if b := p.leastConn(s, req.Tried); b != nil {
			return Result{Backend: b, SetCookie: true}, nil
		}
		return Result{}, ErrNoBackend
	case ClientIP:
		if req.ClientIP.IsValid() {
			if b := p.rendezvous(s, req.ClientIP, req.Tried); b != nil {
				return Result{Backend: b}, nil
			}
			return Result{}, ErrNoBackend
		}
	}
	if b := p.leastConn(s, req.Tried); b != nil {
		return Result{Backend: b}, nil
	}
	return Result{}, ErrNoBackend
}

// Request describes the connection being placed.
type Request struct {
	Cookie   string     // value of the sticky cookie sent by the client, or ""
	ClientIP netip.Addr // the client as decided by the proxy
	Tried    []*Backend // backends already tried for this connection (retries)
}

// Result is the outcome of Pick.
type Result struct {
	// Backend is the chosen backend; the caller acquires it.
	Backend *Backend
	// SetCookie is true when the client must be (re)issued Backend.CookieValue().
	SetCookie bool
}

// leastConn is power-of-two-choices (Mitzenmacher): two distinct usable
// backends drawn at random in proportion to their weights, the less loaded
// one (by (Active+1)/Weight) wins. Unlike a full least-connections scan it
// does not send a burst of new connections to the one backend that happens
// to be lowest, and it needs no lock. Drawing by weight matters with more
// than a few backends: uniform draws would cap any backend near 2/n of new
// connections whatever its weight.
//
// Under a canary (Pool.Canary) the weights are the canary's
// (canaryLeastConn). Backends whose connections are being moved off
// (Backend.SetShedding) are left out while another is usable: a client
// moved off one must land on a backend under its share, not on another
// over it (with six backends, two of them new, a plain pair holds no new
// one two times in five).
func (p *Pool) leastConn(s *Snapshot, tried []*Backend) *Backend {
	if shed := shedding(s, tried); shed != nil {
		if b := p.leastConnOf(s, shed); b != nil {
			return b
		}
	}
	return p.leastConnOf(s, tried)
}

// shedding returns tried and the backends being shed, or nil when none is.
func shedding(s *Snapshot, tried []*Backend) []*Backend {
	var out []*Backend
	for _, b := range s.Backends {
		if b.shedUntil.Load() != 0 && b.Shedding() {
			if out == nil {
				out = append(make([]*Backend, 0, len(tried)+len(s.Backends)), tried...)
			}
			out = append(out, b)
		}
	}
	return out
}

// leastConnOf is leastConn without the rule on shed backends.
func (p *Pool) leastConnOf(s *Snapshot, tried []*Backend) *Backend {
	if c := p.canary.Load(); c != nil {
		if b, ok := p.canaryLeastConn(s, tried, c); ok {
			return b
		}
	}
	n := 0
	var total int64
	var last *Backend
	clk := pickClock{cfg: p.cfg}
	for _, b := range s.Backends {
		if usable(b, tried) {
			n++
			total += b.pickWeight(&clk)
			last = b
		}
	}
	switch n {
	case 0:
		return nil
	case 1:
		return last
	}
	a := weightedAt(s, tried, &clk, p.rand(), total)
	var c *Backend
	// A few weighted draws find a second, distinct candidate; when one
	// backend holds nearly all the weight, take a uniform other one, so the
	// pair is always two distinct backends.
	for range 4 {
		if c = weightedAt(s, tried, &clk, p.rand(), total); c != a {
			break
		}
	}
	if c == a && a != nil {
		c = otherAt(s, tried, a, uniform(p.rand(), n-1))
	}
	switch {
	case a == nil && c == nil:
		return last
	case a == nil:
		return c
	case c == nil:
		return a
	}
	if lessLoaded(c, a, &clk) {
		return c
	}
	return a
}

// otherAt returns the i-th usable backend other than skip, or nil.
func otherAt(s *Snapshot, tried []*Backend, skip *Backend, i int) *Backend {
	for _, b := range s.Backends {
		if b == skip || !usable(b, tried) {
			continue
		}
		if i == 0 {
			return b
		}
		i--
	}
	return nil
}

// weightedAt returns the usable backend that a uniform draw r over the total
// weight falls on. Availability can change during the scan; then it may
// return nil.
func weightedAt(s *Snapshot, tried []*Backend, clk *pickClock, r uint64, total int64) *Backend {
	if total <= 0 {
		return nil
	}
	x := int64(uniform(r, int(total)))
	for _, b := range s.Backends {
		if !usable(b, tried) {
			continue
		}
		x -= b.pickWeight(clk)
		if x < 0 {
			return b
		}
	}
	return nil
}

// uniform maps r onto [0, n) without modulo bias worth speaking of (Lemire's
// multiply-shift).
func uniform(r uint64, n int) int {
	hi, _ := bits.Mul64(r, uint64(n))
	return int(hi)
}

// lessLoaded reports whether x would be less loaded than y after taking one
// more connection, relative to weight (slow start included):
// (x.Active+1)/x.Weight < (y.Active+1)/y.Weight, compared exactly by
// cross-multiplying. Counting the new connection makes weights matter even
// when both backends are idle.
func lessLoaded(x, y *Backend, clk *pickClock) bool {
	return (x.Active()+1)*y.pickWeight(clk) < (y.Active()+1)*x.pickWeight(clk)
}

// rendezvous is weighted rendezvous (highest random weight) hashing with
// bounded load. Every usable backend gets a score from a deterministic hash
// of (backend ID, client address); the highest score wins. Adding a backend
// moves only the clients for which the new one scores highest (about
// 1/(N+1) of them) and moves them only to it; removing one moves only its
// own clients.
//
// Bounded load: a backend is skipped in favour of the next in score order
// only when taking the connection would put it over both
// ceil(BoundedLoad * share) and ceil(share) + MinExcess, where share is its
// weighted share (total+1) * weight / totalWeight of the pool's connections.
// The factor keeps a hot address range from piling onto one backend of a
// busy pool (HAProxy hash-balance-factor, Envoy hash_balance_factor); the
// floor keeps a near-idle pool, whose mean is tiny, from spilling one
// client's own connections, and keeps the edges of a fleet, each counting
// only its own connections, in agreement under normal load. The winner is
// found in one scan (the highest-scoring backend under its bound), without
// sorting; one exists since the bounds sum to more than the total.
//
// Weights are the slow-start ramped ones (pickWeight): a joining backend
// scores and is bounded at its share of its weight, so it takes the
// clients that hash to it a step at a time, alike on every edge.
func (p *Pool) rendezvous(s *Snapshot, ip netip.Addr, tried []*Backend) *Backend {
	var total, wsum, w0 int64
	n := 0
	sameWeight := true
	clk := pickClock{cfg: p.cfg}
	for _, b := range s.Backends {
		if !usable(b, tried) {
			continue
		}
		w := b.pickWeight(&clk)
		if n == 0 {
			w0 = w
		} else if w != w0 {
			sameWeight = false
		}
		n++
		total += b.Active()
		wsum += w
	}
	if n == 0 {
		return nil
	}
	bounded := !math.IsInf(p.boundedLoad, 1) && n > 1
	var bound float64
	if bounded {
		bound = p.boundedLoad * float64(total+1)
	}
	ipHash := hashAddr(ip)
	var best, bestAny *Backend
	bestScore, bestAnyScore := math.Inf(-1), math.Inf(-1)
	for _, b := range s.Backends {
		if !usable(b, tried) {
			continue
		}
		w := b.pickWeight(&clk)
		h := splitmix64(b.idHash ^ ipHash)
		var score float64
		if sameWeight {
			// Equal weights: compare the hash itself (exactly, with no
			// floating point that could differ between platforms).
			score = float64(h >> 11)
		} else {
			// -ln(u)/w is exponential with rate w; the smallest wins with
			// probability w/sum(w). Maximise its inverse.
			u := (float64(h>>11) + 0.5) / (1 << 53)
			score = float64(w) / -math.Log(u)
		}
		if score > bestAnyScore {
			bestAny, bestAnyScore = b, score
		}
		if a := b.Active(); bounded && float64(a) >= math.Ceil(bound*float64(w)/float64(wsum)) && a >= p.floorLimit(total+1, w, wsum) {
			continue
		}
		if score > bestScore {
			best, bestScore = b, score
		}
	}
	if best == nil {
		// Counters moved under us between the scans; stay deterministic.
		return bestAny
	}
	return best
}

// floorLimit is ceil(total * w / wsum) + p.minExcess, the floor of a
// backend's load bound, in exact integer arithmetic (saturating), so every
// edge computes the same value.
func (p *Pool) floorLimit(total, w, wsum int64) int64 {
	hi, lo := bits.Mul64(uint64(total), uint64(w))
	if hi != 0 {
		return math.MaxInt64
	}
	share := int64(lo/uint64(wsum)) + boolInt(lo%uint64(wsum) != 0)
	if share < 0 || share > math.MaxInt64-p.minExcess {
		return math.MaxInt64
	}
	return share + p.minExcess
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

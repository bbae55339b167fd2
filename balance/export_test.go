package balance

import (
	"sync/atomic"
	"time"
)

// SetRandForTest replaces the pool's random source (before any Pick) so
// statistical tests are reproducible.
func (p *Pool) SetRandForTest(r func() uint64) { p.rand = r }

// LookupCookie returns what the snapshot's cookie table says about v,
// without any fallback.
func (s *Snapshot) LookupCookie(v string) (b *Backend, primary bool) {
	e, ok := s.byCookie[v]
	if !ok {
		return nil, false
	}
	return e.b, e.primary
}

// RetiredForTest is the number of removed backends kept for their live
// connections.
func (p *Pool) RetiredForTest() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.retired)
}

// EntriesForTest is the number of clients the limiter remembers.
func (l *Limiter) EntriesForTest() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// CookieLen is the length of every valid cookie value.
var CookieLen = cookieLen

// FakeClock is a settable clock for ejection and limiter tests, safe for
// concurrent use.
type FakeClock struct{ ns atomic.Int64 }

// NewFakeClock starts at a fixed instant.
func NewFakeClock() *FakeClock {
	c := &FakeClock{}
	c.ns.Store(time.Unix(1_700_000_000, 0).UnixNano())
	return c
}

// Now returns the current fake time.
func (c *FakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock forward.
func (c *FakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

package balance

import "time"

// Slow start: a backend that joins a pool, or comes back from ejection or a
// failing check, has no connections and would win every least-connections
// comparison, on every edge at once, until it caught up (HAProxy's
// slowstart, Envoy's slow_start_config). Instead its weight ramps from
// slowStartMinShare to full over PoolOptions.SlowStart, in slowStartSteps
// steps. The ramp of a joining backend starts at Member.Since, the time the
// member appeared in the registry, which every edge learns from the same
// answer, so the edges of a fleet ramp it alike; the steps keep their
// picks identical (client_ip) except within a clock skew of a step
// boundary.

// rampScale is the fixed-point scale of a share: picks compare
// weight*share, where a backend at full weight has share rampScale, in
// exact integer arithmetic (MaxWeight*rampScale*active fits an int64 for
// any count of connections a process can hold).
const rampScale = 1000

// slowStartMinShare is the share a ramp starts from, of rampScale: 10 %,
// Envoy's default min_weight_percent. A share of zero would send the
// backend nothing until the first step, and least-connections would then
// flood it at that step instead.
const slowStartMinShare = 100

// slowStartSteps is how many times the share grows during a ramp.
const slowStartSteps = 20

// startRamp starts a slow-start ramp at from (unix nanoseconds), unless one
// that started later is under way or slow start is off.
func (b *Backend) startRamp(from int64) {
	if b.cfg == nil || b.cfg.slowStart <= 0 || from == 0 {
		return
	}
	for {
		cur := b.rampFrom.Load()
		if cur >= from || b.rampFrom.CompareAndSwap(cur, from) {
			return
		}
	}
}

// noteJoined applies a member's join time: a later one than any applied
// before starts a ramp from it. Callers hold the pool's writer mutex.
func (b *Backend) noteJoined(since time.Time) {
	if since.IsZero() {
		return
	}
	ns := since.UnixNano()
	if ns <= b.joined.Load() {
		return
	}
	b.joined.Store(ns)
	b.startRamp(ns)
}

// share returns b's slow-start share of rampScale at now (unix
// nanoseconds), and clears a finished ramp so later picks skip the clock.
func (b *Backend) share(now int64) int64 {
	from := b.rampFrom.Load()
	if from == 0 {
		return rampScale
	}
	ss := int64(b.cfg.slowStart)
	el := now - from
	switch {
	case el >= ss:
		b.rampFrom.CompareAndSwap(from, 0)
		return rampScale
	case el < 0: // ejected until from, or a clock behind the registry's
		return slowStartMinShare
	}
	// el < ss, and a ramp of hours in nanoseconds times the steps fits.
	step := el * slowStartSteps / ss
	return slowStartMinShare + (rampScale-slowStartMinShare)*step/slowStartSteps
}

// SlowStartShare returns the share of its weight b gets now, from 0.1 at the
// start of a slow-start ramp to 1 at full weight.
func (b *Backend) SlowStartShare() float64 {
	if b.rampFrom.Load() == 0 {
		return 1
	}
	return float64(b.share(b.now().UnixNano())) / rampScale
}

// SlowStart reports whether b is ramping up, and when it reaches its full
// weight.
func (b *Backend) SlowStart() (until time.Time, ok bool) {
	from := b.rampFrom.Load()
	if from == 0 || b.share(b.now().UnixNano()) == rampScale {
		return time.Time{}, false
	}
	return time.Unix(0, from+int64(b.cfg.slowStart)), true
}

// pickClock reads the clock at most once per pick, and only if some
// backend is ramping.
type pickClock struct {
	cfg *backendConfig
	ns  int64
}

func (c *pickClock) now() int64 {
	if c.ns == 0 {
		c.ns = c.cfg.now().UnixNano()
	}
	return c.ns
}

// pickWeight is b's weight as picks compare it: weight times its
// slow-start share, on the rampScale.
func (b *Backend) pickWeight(c *pickClock) int64 {
	w := b.weight.Load()
	if b.rampFrom.Load() == 0 {
		return w * rampScale
	}
	return w * b.share(c.now())
}

package gcpace

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// GC pacing. An edge holding many idle WebSockets has a live heap of many
// small long-lived objects (one TLS state per connection), and the
// default GOGC=100 lets the heap grow to twice that before collecting:
// most of the memory per idle connection. What the heap may grow by
// between collections (the headroom) is paid in memory by every process,
// so it is sized by what the process allocates, not by its live heap:
//
//   - The collector's CPU: a cycle costs about cycleCost(live) (fixed
//     costs plus marking the live heap), and at rate bytes a second with
//     h of headroom it runs rate/h times a second. The headroom is the
//     least that keeps that under gcCPUShare of a core. A handshake burst
//     of a few hundred a second so gets the whole upper bound, as before:
//     its CPU does not change; a process holding its connections with
//     little traffic allocates far less and needs far less (the figures
//     are in docs/BENCHMARKS.md, "settled memory per held connection").
//   - Never more than the fixed policy this replaced (gcHeadroom for a
//     heap under 32 MiB, half a bigger one, at most gcMaxPercent): no load
//     costs more memory than before. Back then every process kept the
//     whole bound, also while it held its connections with little
//     traffic.
//   - At least gcMinHeadroom, or a tenth of the live heap: the rate is
//     measured after the fact, and while the estimate catches up with a
//     sudden burst (one gcTuneEvery) a heap with no headroom would collect
//     back to back.
//
// gcpace_test.go checks each bound.
const (
	gcBasePercent = 50
	gcMaxPercent  = 400 // the runtime's heap minimum scales with it: 16 MiB here
	gcHeadroom    = 16 << 20
	gcMinHeadroom = 2 << 20
	gcMinPercent  = 10
	gcTuneEvery   = 500 * time.Millisecond

	// gcCPUShare is the share of one core the collector may take at
	// the current allocation rate before the headroom grows.
	gcCPUShare = 0.0025
	// The CPU of one collection, in seconds: fixed costs and the mark
	// of each live byte, fitted to what GODEBUG=gctrace=1 measured on edge
	// in a burst of handshakes and while holding them (docs/BENCHMARKS.md,
	// "settled memory per held connection").
	gcCycleFixed   = 0.5e-3
	gcCyclePerByte = 0.5e-3 / (1 << 20)

	// gcRateDecay is how fast the rate estimate falls, per step: a lull
	// of a second between two waves of a burst keeps about half the
	// headroom, a burst that ended gives it back within a few seconds.
	gcRateDecay = 0.7
)

// cycleCost is the CPU of one collection of a live heap of live bytes, in
// seconds.
func cycleCost(live uint64) float64 { return gcCycleFixed + gcCyclePerByte*float64(live) }

// Headroom returns the bytes a live heap of live bytes, allocating rate
// bytes a second, may grow by between collections (see gcCPUShare).
func Headroom(live uint64, rate float64) uint64 {
	lo := max(uint64(gcMinHeadroom), live*gcMinPercent/100)
	hi := min(max(uint64(gcHeadroom), live*gcBasePercent/100), live*gcMaxPercent/100)
	// Converted in float: a heap of gigabytes at a high rate asks for
	// more than a uint64 holds.
	want := rate * cycleCost(live) / gcCPUShare
	h := hi
	if want < float64(hi) {
		h = uint64(want)
	}
	return max(lo, h)
}

// PercentFor returns the GOGC percent for a live heap of live bytes
// allocating rate bytes a second.
func PercentFor(live uint64, rate float64) int {
	if live == 0 {
		return gcMaxPercent
	}
	// Rounded up: the runtime's goal is live × (1 + percent/100).
	p := (Headroom(live, rate)*100 + live - 1) / live
	return int(max(1, min(p, gcMaxPercent)))
}

// nextRate is the rate estimate after one step that measured sample: a
// rise at once, a fall by gcRateDecay a step at most.
func nextRate(est, sample float64) float64 { return max(sample, est*gcRateDecay) }

// ReturnMemory is the proxy's Quiet (proxy.Options.Quiet): once a burst
// of new connections is over, one forced collection gives back the
// garbage every TLS handshake left, which the collector keeps as headroom
// (RSS after a burst is otherwise about twice the live heap). The proxy
// calls it at most once a minute, whatever the traffic: its pause is the
// madvise of the freed pages (docs/BENCHMARKS.md, "settled memory per
// held connection", has its length).
func ReturnMemory() { debug.FreeOSMemory() }

// Tuner follows the live heap and the allocation rate and sets the GC
// percent from them.
type Tuner struct {
	cur    int
	rate   float64 // bytes a second, estimated (nextRate)
	allocs uint64  // bytes ever allocated at last
	last   time.Time
	sample []rtmetrics.Sample
}

// New sets the base percent and returns the tuner that follows the heap
// from there; Run it.
func New() *Tuner {
	t := &Tuner{sample: []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"}}}
	rtmetrics.Read(t.sample)
	if t.sample[1].Value.Kind() == rtmetrics.KindUint64 {
		t.allocs = t.sample[1].Value.Uint64()
	}
	t.last = time.Now()
	t.cur = gcBasePercent
	debug.SetGCPercent(t.cur)
	return t
}

// step reads the live heap and the bytes allocated since the last step,
// at now, and changes the percent when it moved by more than a tenth, so
// a steady load never touches the pacer.
func (t *Tuner) step(now time.Time) {
	rtmetrics.Read(t.sample)
	if t.sample[0].Value.Kind() != rtmetrics.KindUint64 || t.sample[1].Value.Kind() != rtmetrics.KindUint64 {
		return
	}
	allocs := t.sample[1].Value.Uint64()
	if dt := now.Sub(t.last).Seconds(); dt > 0 {
		t.rate = nextRate(t.rate, float64(allocs-t.allocs)/dt)
		t.allocs, t.last = allocs, now
	}
	want := PercentFor(t.sample[0].Value.Uint64(), t.rate)
	if d := want - t.cur; d*10 > t.cur || -d*10 > t.cur {
		t.cur = want
		debug.SetGCPercent(want)
	}
}

// Run steps every gcTuneEvery until ctx ends.
func (t *Tuner) Run(ctx context.Context) {
	tk := time.NewTicker(gcTuneEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			t.step(now)
		}
	}
}

package gcpace

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// GC pacing. An edge holding many idle WebSockets has a live heap of many
// small long-lived objects (one TLS state per connection), and the default
// GOGC=100 lets the heap grow to twice that before collecting: most of the
// memory per idle connection. So the base is 50. With few connections the
// same percent is a tiny allowance, though: at a 3 MiB live heap the
// collector runs every 1.5 MiB allocated, that is every few dozen TLS
// handshakes, and each cycle pays fixed costs (stacks, globals, sweeping)
// whatever the heap holds. The tuner raises the percent while the live heap
// is small, so the heap may always grow by at least gcHeadroom between
// collections; from gcHeadroom/0.5 = 32 MiB of live heap on it is the base.
const (
	gcBasePercent = 50
	gcMaxPercent  = 400 // the runtime's heap minimum scales with it: 16 MiB here
	gcHeadroom    = 16 << 20
	gcTuneEvery   = 500 * time.Millisecond
)

// ReturnMemory is the proxy's Quiet (proxy.Options.Quiet): once a burst
// of new connections is over, one forced collection gives back the
// garbage every TLS handshake left, which the collector keeps as headroom
// (RSS after a burst is otherwise about twice the live heap). The proxy
// calls it at most once a minute, whatever the traffic: its pause is the
// madvise of the freed pages, about 2 ms for 32 MiB.
func ReturnMemory() { debug.FreeOSMemory() }

// PercentFor returns the GOGC percent for a live heap of live bytes.
func PercentFor(live uint64) int {
	if live == 0 {
		return gcMaxPercent
	}
	p := gcHeadroom * 100 / live
	switch {
	case p <= gcBasePercent:
		return gcBasePercent
	case p >= gcMaxPercent:
		return gcMaxPercent
	}
	return int(p)
}

// Tuner follows the live heap and sets the GC percent from it.
type Tuner struct {
	cur    int
	sample []rtmetrics.Sample
}

// New sets the base percent and returns the tuner that follows the heap
// from there; Run it.
func New() *Tuner {
	t := &Tuner{sample: []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.cur = gcBasePercent
	debug.SetGCPercent(t.cur)
	return t
}

// step reads the live heap and changes the percent when it moved by more
// than a tenth, so a steady heap never touches the pacer.
func (t *Tuner) step() {
	rtmetrics.Read(t.sample)
	if t.sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return
	}
	want := PercentFor(t.sample[0].Value.Uint64())
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
		case <-tk.C:
			t.step()
		}
	}
}

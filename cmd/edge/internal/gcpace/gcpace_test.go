package gcpace

import (
	"runtime/debug"
	"testing"
)

const mib = 1 << 20

// oldHeadroom is the fixed policy this one replaced: a heap under 32 MiB
// might always grow by 16 MiB, a bigger one by half (capped at 400 %).
func oldHeadroom(live uint64) uint64 {
	h := max(uint64(gcHeadroom), live*gcBasePercent/100)
	return min(h, live*gcMaxPercent/100)
}

// handshakeAlloc is what one full TLS 1.3 handshake and upgrade allocate
// on edge (588 MB over 9,000 in the box run of docs/BENCHMARKS.md).
const handshakeAlloc = 65 << 10

func TestHeadroom(t *testing.T) {
	for _, c := range []struct {
		name      string
		live      uint64
		rate      float64 // bytes allocated a second
		want      uint64  // 0: only the bounds below
		atLeast   uint64
		atMost    uint64
		wantShare bool // the collector's CPU is gcCPUShare
	}{
		// 9,000 held connections, nothing moves: the least headroom.
		{name: "idle edge", live: 20 * mib, rate: 0, want: gcMinHeadroom},
		// The same with 1 % sending once a second and pings every 30 s
		// (0.58 MB/s in the box run): a few MiB, a cycle every few
		// seconds.
		{name: "holding", live: 20 * mib, rate: 0.58e6, atLeast: gcMinHeadroom, atMost: 4 * mib, wantShare: true},
		// A handshake burst of 300 a second keeps the old 16 MiB: its
		// CPU does not change.
		{name: "fast burst", live: 20 * mib, rate: 300 * handshakeAlloc, want: gcHeadroom},
		// A slower burst gets less, and the collector's CPU stays at
		// gcCPUShare.
		{name: "slow burst", live: 20 * mib, rate: 40 * handshakeAlloc, atLeast: gcMinHeadroom + 1, atMost: gcHeadroom - 1, wantShare: true},
		// A big heap at rest keeps a tenth: a sudden rate cannot make it
		// collect back to back while the estimate catches up.
		{name: "big heap at rest", live: 1 << 30, rate: 0, want: (1 << 30) / 10},
		// A big heap allocating fast gets the old half.
		{name: "big heap busy", live: 1 << 30, rate: 200e6, want: 1 << 29},
		{name: "tiny heap busy", live: 1 * mib, rate: 200e6, want: 4 * mib},
		{name: "empty", live: 0, rate: 1e6, want: gcMinHeadroom},
	} {
		got := Headroom(c.live, c.rate)
		if c.want != 0 && got != c.want {
			t.Errorf("%s: Headroom(%d MiB, %.0f B/s) = %.2f MiB, want %.2f", c.name, c.live/mib, c.rate, float64(got)/mib, float64(c.want)/mib)
		}
		if c.atLeast != 0 && got < c.atLeast || c.atMost != 0 && got > c.atMost {
			t.Errorf("%s: Headroom = %.2f MiB, want %.2f to %.2f", c.name, float64(got)/mib, float64(c.atLeast)/mib, float64(c.atMost)/mib)
		}
		if c.wantShare {
			// cycles a second × CPU of a cycle
			share := c.rate / float64(got) * cycleCost(c.live)
			if share < 0.99*gcCPUShare || share > 1.01*gcCPUShare {
				t.Errorf("%s: the collector would take %.3f %% of a core, want %.3f", c.name, 100*share, 100*gcCPUShare)
			}
		}
	}
}

// The new headroom never exceeds the old one (no more memory than
// before, whatever the load), grows with the rate and, below the old
// bound, keeps the collector's CPU under gcCPUShare.
func TestHeadroomBounds(t *testing.T) {
	for _, live := range []uint64{1 << 10, mib, 4 * mib, 12 * mib, 20 * mib, 32 * mib, 100 * mib, 1 << 30, 8 << 30} {
		prev := uint64(0)
		for _, rate := range []float64{0, 1e3, 1e5, 5e5, 1e6, 3e6, 1e7, 3e7, 1e8, 1e9, 1e10} {
			h := Headroom(live, rate)
			if old := oldHeadroom(live); h > max(old, gcMinHeadroom) {
				t.Errorf("Headroom(%d KiB, %.0g) = %d KiB, above the old %d KiB", live>>10, rate, h>>10, old>>10)
			}
			if h < prev {
				t.Errorf("Headroom(%d KiB, %.0g) = %d KiB, less than at a lower rate (%d KiB)", live>>10, rate, h>>10, prev>>10)
			}
			prev = h
			if h < oldHeadroom(live) && h > max(gcMinHeadroom, live/10) {
				if share := rate / float64(h) * cycleCost(live); share > 1.01*gcCPUShare {
					t.Errorf("Headroom(%d KiB, %.0g) = %d KiB: the collector takes %.3f %% of a core", live>>10, rate, h>>10, 100*share)
				}
			}
		}
	}
}

func TestPercentFor(t *testing.T) {
	for _, c := range []struct {
		live uint64
		rate float64
		want int
	}{
		{0, 0, gcMaxPercent},
		{1 * mib, 0, 200},             // 2 MiB of headroom on 1
		{20 * mib, 0, 10},             // 2 MiB on 20
		{20 * mib, 1e8, 80},           // 16 MiB on 20, as before
		{8 * mib, 1e8, 200},           // as before
		{1 << 30, 0, 10},              // a tenth
		{1 << 30, 1e9, gcBasePercent}, // as before
		{100 << 30, 0, 10},
	} {
		if got := PercentFor(c.live, c.rate); got != c.want {
			t.Errorf("PercentFor(%d MiB, %.0g) = %d, want %d", c.live/mib, c.rate, got, c.want)
		}
	}
}

// The rate estimate follows a rise at once (a burst gets its headroom
// within one step) and a fall by gcRateDecay a step (a lull between two
// waves of a burst does not drop it at once).
func TestNextRate(t *testing.T) {
	if got := nextRate(1e6, 3e7); got != 3e7 {
		t.Errorf("rise: %g, want 3e7", got)
	}
	est := 3e7
	for i := range 20 {
		next := nextRate(est, 5e5)
		want := max(est*gcRateDecay, 5e5)
		if next != want {
			t.Fatalf("step %d: %g, want %g", i, next, want)
		}
		est = next
	}
	if est != 5e5 {
		t.Errorf("after 20 steps: %g, want the rate sampled, 5e5", est)
	}
}

// The tuner changes the runtime's percent: with this test binary's small
// heap it goes above the base.
func TestGCTunerSetsPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	tu := New()
	if got := debug.SetGCPercent(gcBasePercent); got != gcBasePercent {
		t.Fatalf("after New percent = %d, want %d", got, gcBasePercent)
	}
	tu.step(tu.last.Add(gcTuneEvery))
	live := tu.sample[0].Value.Uint64()
	got := debug.SetGCPercent(gcBasePercent)
	if want := PercentFor(live, tu.rate); got != want || got <= gcBasePercent {
		t.Fatalf("live heap %d B, rate %.0f B/s: percent = %d, want %d (> base)", live, tu.rate, got, want)
	}
}

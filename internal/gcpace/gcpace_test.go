package gcpace

import (
	"runtime/debug"
	"testing"
)

func TestGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, gcMaxPercent},
		{1 << 20, gcMaxPercent},         // 1 MiB: 1600 % capped
		{4 << 20, gcMaxPercent},         // 4 MiB: exactly 400 %
		{8 << 20, 200},                  // 8 MiB may grow by 16 MiB
		{16 << 20, 100},                 //
		{32 << 20, gcBasePercent},       // from here on the base
		{1 << 30, gcBasePercent},        // a big edge stays lean
		{(32 << 20) - 1, gcBasePercent}, // rounding never goes under the base
	} {
		if got := PercentFor(c.live); got != c.want {
			t.Errorf("PercentFor(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
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
	tu.step()
	live := tu.sample[0].Value.Uint64()
	got := debug.SetGCPercent(gcBasePercent)
	if want := PercentFor(live); got != want || got <= gcBasePercent {
		t.Fatalf("live heap %d B: percent = %d, want %d (> base)", live, got, want)
	}
}

package balance_test

import (
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

func TestPassiveEjection(t *testing.T) {
	// Each step: advance the clock, then report ("f" failure, "s" success,
	// "-" nothing), then check Ejected.
	type step struct {
		advance time.Duration
		report  string
		ejected bool
	}
	opts := balance.EjectOptions{Failures: 3, Window: 10 * time.Second, Cooldown: 30 * time.Second}
	tests := []struct {
		name  string
		opts  balance.EjectOptions
		steps []step
	}{
		{"failures within window eject", opts, []step{
			{0, "f", false}, {time.Second, "f", false}, {time.Second, "f", true},
		}},
		{"failures spread beyond window do not", opts, []step{
			{0, "f", false}, {6 * time.Second, "f", false}, {6 * time.Second, "f", false}, // first has aged out
			{time.Second, "f", true},
		}},
		{"success resets the count", opts, []step{
			{0, "f", false}, {0, "f", false}, {0, "s", false}, {0, "f", false}, {0, "f", false}, {0, "f", true},
		}},
		{"recovers after cooldown with a fresh count", opts, []step{
			{0, "f", false}, {0, "f", false}, {0, "f", true},
			{29 * time.Second, "-", true},
			{time.Second, "-", false},
			{0, "f", false}, {0, "f", false}, {0, "f", true},
		}},
		{"failures while ejected are ignored", opts, []step{
			{0, "f", false}, {0, "f", false}, {0, "f", true},
			{time.Second, "f", true}, {time.Second, "f", true}, {time.Second, "f", true},
			{28 * time.Second, "-", false}, // cooldown not extended, nothing carried over
			{0, "f", false},
		}},
		{"no window counts consecutive failures", balance.EjectOptions{Failures: 2}, []step{
			{0, "f", false}, {time.Hour, "f", true},
			{balance.DefaultEjectCooldown, "-", false},
		}},
		{"disabled", balance.EjectOptions{}, []step{
			{0, "f", false}, {0, "f", false}, {0, "f", false}, {0, "f", false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := balance.NewFakeClock()
			p := newPool(t, balance.PoolOptions{Eject: tt.opts, Now: clock.Now}, members(2)...)
			b := byID(t, p, "b00")
			for i, s := range tt.steps {
				clock.Advance(s.advance)
				switch s.report {
				case "f":
					b.ReportFailure()
				case "s":
					b.ReportSuccess()
				}
				if got := b.Ejected(); got != s.ejected {
					t.Fatalf("step %d (%+v): Ejected got %v, want %v", i, s, got, s.ejected)
				}
				if got := b.Available(); got != !s.ejected {
					t.Fatalf("step %d: Available got %v, want %v", i, got, !s.ejected)
				}
			}
		})
	}
}

func TestEjectedBackendSkippedUntilCooldown(t *testing.T) {
	clock := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{Eject: balance.EjectOptions{Failures: 1, Cooldown: time.Minute}, Now: clock.Now}, members(2)...)
	bad := byID(t, p, "b00")
	bad.ReportFailure()
	for range 100 {
		if got := pick(t, p, balance.Request{}).Backend; got == bad {
			t.Fatalf("picked the ejected backend")
		}
	}
	if got, want := bad.Ejections(), int64(1); got != want {
		t.Errorf("Ejections: got %d, want %d", got, want)
	}
	clock.Advance(time.Minute)
	picked := false
	for range 100 {
		picked = picked || pick(t, p, balance.Request{}).Backend == bad
	}
	if !picked {
		t.Errorf("backend not picked again after its cooldown")
	}
}

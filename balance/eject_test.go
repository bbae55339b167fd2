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

// failAll reports f failures for each backend in order and returns how many
// of the pool's members are ejected afterwards.
func failAll(p *balance.Pool, f int) int {
	for _, b := range p.Snapshot().Backends {
		for range f {
			b.ReportFailureReason("connect_refused")
		}
	}
	return p.Ejected()
}

func TestEjectionCap(t *testing.T) {
	tests := []struct {
		name    string
		members int
		pct     int
		want    int // ejected after every member failed enough
	}{
		{"4 backends, cap 50%: at most 2", 4, 50, 2},
		{"default cap on 4 backends is 50%", 4, 0, 2},
		{"3 backends, cap 50%: 1", 3, 50, 1},
		{"2 backends, cap 50%: 1", 2, 50, 1},
		{"10 backends, cap 10%: 1", 10, 10, 1},
		{"5 backends, cap 10%: still 1 (as Envoy)", 5, 10, 1},
		{"cap 100% still keeps the last available", 3, 100, 2},
		{"a single backend is never ejected", 1, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := balance.NewFakeClock()
			var events []balance.EjectEvent
			p := newPool(t, balance.PoolOptions{
				Eject:   balance.EjectOptions{Failures: 2, MaxPercent: tt.pct},
				Now:     clock.Now,
				OnEject: func(ev balance.EjectEvent) { events = append(events, ev) },
			}, members(tt.members)...)
			if got := failAll(p, 3); got != tt.want {
				t.Fatalf("ejected: got %d, want %d", got, tt.want)
			}
			if got := p.MaxEjected(); tt.members > 1 && tt.want < tt.members-1 && got != tt.want {
				t.Errorf("MaxEjected: got %d, want %d", got, tt.want)
			}
			var ejections, refused int
			for _, ev := range events {
				if ev.Refused {
					refused++
					continue
				}
				ejections++
				if ev.Reason != "connect_refused" || ev.Until.IsZero() || ev.Pool != p.Name() {
					t.Errorf("ejection event %+v: want reason, until and pool", ev)
				}
			}
			if ejections != tt.want || refused != tt.members-tt.want {
				t.Errorf("events: %d ejections, %d refusals; want %d and %d", ejections, refused, tt.want, tt.members-tt.want)
			}
			var refusedCount int64
			for _, b := range p.Snapshot().Backends {
				refusedCount += b.EjectionsRefused()
			}
			// Each refused member failed 3 times with a threshold of 2: two refusals each.
			if want := int64(2 * (tt.members - tt.want)); refusedCount != want {
				t.Errorf("EjectionsRefused: got %d, want %d", refusedCount, want)
			}
		})
	}
}

func TestEjectionNeverTakesTheLastAvailable(t *testing.T) {
	clock := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{Eject: balance.EjectOptions{Failures: 1, MaxPercent: 100}, Now: clock.Now}, members(3)...)
	// b00 and b01 are down by active checks: b02 is the last available.
	byID(t, p, "b00").SetHealthy(false)
	byID(t, p, "b01").SetHealthy(false)
	last := byID(t, p, "b02")
	for range 10 {
		last.ReportFailure()
	}
	if last.Ejected() || !last.Available() {
		t.Fatalf("the last available backend was ejected")
	}
	if got := pick(t, p, balance.Request{}).Backend; got != last {
		t.Fatalf("picked %s, want the last available", got.ID())
	}
}

func TestRefusedEjectionHappensOnceTheCapHasRoom(t *testing.T) {
	clock := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{Eject: balance.EjectOptions{Failures: 2, Cooldown: 30 * time.Second}, Now: clock.Now}, members(2)...)
	a, b := byID(t, p, "b00"), byID(t, p, "b01")
	a.ReportFailure()
	a.ReportFailure()
	b.ReportFailure()
	b.ReportFailure()
	if !a.Ejected() || b.Ejected() {
		t.Fatalf("want only b00 ejected: %v %v", a.Ejected(), b.Ejected())
	}
	clock.Advance(30 * time.Second) // a's cooldown over
	b.ReportFailure()               // b still fails: its counted failures reach the threshold again
	if !b.Ejected() {
		t.Fatalf("b01 not ejected once the cap had room")
	}
	if a.Ejected() {
		t.Fatalf("b00 ejected again without failing")
	}
}

// TestRejoiningBackendKeepsTheCap: a backend that left the pool while still
// holding connections is ejected freely (it takes nobody's place), but when
// it comes back it must not bring that ejection with it past the cap: a
// registry flap would otherwise leave more of the pool ejected than
// max_ejection_percent allows.
func TestRejoiningBackendKeepsTheCap(t *testing.T) {
	clock := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{Eject: balance.EjectOptions{Failures: 2, Cooldown: time.Minute, MaxPercent: 50}, Now: clock.Now}, members(3)...)
	a := byID(t, p, "b00")
	a.Acquire() // a live connection keeps it as a retired backend
	defer a.Release()
	if err := p.Update(members(3)[1:]); err != nil {
		t.Fatal(err)
	}
	a.ReportFailure() // a handshake that was under way when it left
	a.ReportFailure()
	b := byID(t, p, "b01")
	b.ReportFailure()
	b.ReportFailure()
	if !b.Ejected() {
		t.Fatal("b01 not ejected: the cap has room for one of two")
	}
	if err := p.Update(members(3)); err != nil {
		t.Fatal(err)
	}
	if byID(t, p, "b00") != a {
		t.Fatal("b00 came back as a new backend; want the retired one")
	}
	if got, limit := p.Ejected(), p.MaxEjected(); got > limit {
		t.Fatalf("after b00 rejoined: %d of 3 ejected, cap %d", got, limit)
	}
}

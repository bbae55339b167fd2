package balance_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

func TestNewPoolValidation(t *testing.T) {
	tests := []struct {
		name    string
		opts    balance.PoolOptions
		wantErr string // substring; "" means success
	}{
		{"defaults", balance.PoolOptions{Name: "p"}, ""},
		{"client ip with bound", balance.PoolOptions{Mode: balance.ClientIP, BoundedLoad: 2}, ""},
		{"unbounded", balance.PoolOptions{Mode: balance.ClientIP, BoundedLoad: math.Inf(1)}, ""},
		{"bounded load below one", balance.PoolOptions{BoundedLoad: 0.5}, "bounded load"},
		{"bounded load NaN", balance.PoolOptions{BoundedLoad: math.NaN()}, "bounded load"},
		{"unknown mode", balance.PoolOptions{Mode: 7}, "mode 7"},
		{"negative max conns", balance.PoolOptions{MaxConnsPerBackend: -1}, "max connections"},
		{"negative ejection", balance.PoolOptions{Eject: balance.EjectOptions{Failures: -1}}, "passive ejection"},
		{"short cookie key", balance.PoolOptions{Cookie: balance.CookieOptions{Keys: [][]byte{keyA, []byte("short")}}}, "cookie key 1"},
		{"good cookie keys", balance.PoolOptions{Mode: balance.Cookie, Cookie: balance.CookieOptions{Keys: [][]byte{keyA, keyB}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := balance.NewPool(tt.opts)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestUpdateRejectsBadMembers(t *testing.T) {
	tests := []struct {
		name    string
		members []balance.Member
		want    []string // substrings of the error
	}{
		{"empty address", []balance.Member{{ID: "x", Addr: ""}}, []string{`"x"`, "empty address"}},
		{"duplicate id", []balance.Member{{ID: "x", Addr: "1.1.1.1:1"}, {ID: "x", Addr: "2.2.2.2:2"}}, []string{`member 1 (id "x")`, "duplicate id"}},
		{"duplicate default id", []balance.Member{{Addr: "1.1.1.1:1"}, {Addr: "1.1.1.1:1"}}, []string{`"1.1.1.1:1"`, "duplicate"}},
		{"negative weight", []balance.Member{{ID: "x", Addr: "1.1.1.1:1", Weight: -1}}, []string{"weight -1"}},
		{"huge weight", []balance.Member{{ID: "x", Addr: "1.1.1.1:1", Weight: balance.MaxWeight + 1}}, []string{"weight"}},
		{"every problem reported", []balance.Member{{ID: "x"}, {ID: "y"}}, []string{`"x"`, `"y"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, balance.PoolOptions{Name: "chat"}, members(2)...)
			before := p.Snapshot()
			err := p.Update(tt.members)
			if err == nil {
				t.Fatal("got nil error, want one")
			}
			if !errors.Is(err, balance.ErrInvalidMember) {
				t.Errorf("got %v, want it to wrap ErrInvalidMember", err)
			}
			for _, w := range append(tt.want, `pool "chat"`) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got error %q, want it to contain %q", err, w)
				}
			}
			if got := p.Snapshot(); got != before {
				t.Errorf("snapshot replaced after a failed update")
			}
		})
	}
}

func TestUpdateNormalises(t *testing.T) {
	p := newPool(t, balance.PoolOptions{},
		balance.Member{ID: "c", Addr: "10.0.0.3:80", Weight: 3},
		balance.Member{Addr: "10.0.0.9:80"},
		balance.Member{ID: "a", Addr: "10.0.0.1:80"},
	)
	var got []string
	for _, b := range p.Snapshot().Backends {
		got = append(got, b.ID())
	}
	if want := []string{"10.0.0.9:80", "a", "c"}; !slices.Equal(got, want) {
		t.Errorf("got ids %v, want %v (sorted, id defaulting to addr)", got, want)
	}
	if got, want := byID(t, p, "a").Weight(), 1; got != want {
		t.Errorf("weight 0: got %d, want %d", got, want)
	}
	if got, want := byID(t, p, "c").Weight(), 3; got != want {
		t.Errorf("weight: got %d, want %d", got, want)
	}
	if got := p.Snapshot().ByID("nope"); got != nil {
		t.Errorf("ByID(nope): got %v, want nil", got)
	}
}

func TestUpdateKeepsBackends(t *testing.T) {
	p := newPool(t, balance.PoolOptions{}, members(3)...)
	b0, b1, b2 := byID(t, p, "b00"), byID(t, p, "b01"), byID(t, p, "b02")
	b0.Acquire()
	b0.Acquire()
	b1.SetHealthy(false)
	b2.Acquire()

	next := members(3)
	next[0].Weight = 5                                                        // weight change: same backend
	next[1].Addr = "10.9.9.9:8080"                                            // address change: new backend
	next = append(next[:2], balance.Member{ID: "b03", Addr: "10.0.0.4:8080"}) // b02 removed
	if err := p.Update(next); err != nil {
		t.Fatal(err)
	}
	if got := byID(t, p, "b00"); got != b0 {
		t.Errorf("b00: pointer changed on a weight update")
	}
	if got, want := b0.Active(), int64(2); got != want {
		t.Errorf("b00 active: got %d, want %d", got, want)
	}
	if got, want := b0.Weight(), 5; got != want {
		t.Errorf("b00 weight: got %d, want %d", got, want)
	}
	nb1 := byID(t, p, "b01")
	if nb1 == b1 {
		t.Errorf("b01: pointer kept although the address changed")
	}
	if !nb1.Healthy() || nb1.Addr() != "10.9.9.9:8080" {
		t.Errorf("b01: got healthy=%v addr=%q, want a fresh healthy backend at the new address", nb1.Healthy(), nb1.Addr())
	}
	if p.Snapshot().ByID("b02") != nil {
		t.Errorf("b02 still present after removal")
	}
	if got, want := p.RetiredForTest(), 1; got != want {
		t.Errorf("retired: got %d, want %d (b02 holds a connection)", got, want)
	}

	// b02 flaps back while its connection is alive: same object, same count.
	if err := p.Update(append(next, balance.Member{ID: "b02", Addr: "10.0.0.3:8080"})); err != nil {
		t.Fatal(err)
	}
	if got := byID(t, p, "b02"); got != b2 || got.Active() != 1 {
		t.Errorf("b02 re-added: got %p active %d, want %p active 1", got, got.Active(), b2)
	}
	// Once its connections are gone a removed backend is forgotten.
	b2.Release()
	if err := p.Update(next); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(next); err != nil {
		t.Fatal(err)
	}
	if got := p.RetiredForTest(); got != 0 {
		t.Errorf("retired: got %d, want 0", got)
	}
}

func TestModeString(t *testing.T) {
	for _, m := range []balance.Mode{balance.LeastConn, balance.Cookie, balance.ClientIP} {
		got, err := balance.ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q): got %v, %v; want %v", m.String(), got, err, m)
		}
	}
	if _, err := balance.ParseMode("round_robin"); err == nil {
		t.Errorf("ParseMode(round_robin): got nil error")
	}
}

func TestStartUnhealthy(t *testing.T) {
	p := newPool(t, balance.PoolOptions{StartUnhealthy: true}, members(2)...)
	if _, err := p.Pick(&balance.Request{}); err != balance.ErrNoBackend {
		t.Fatalf("before any check: got %v, want ErrNoBackend", err)
	}
	b := byID(t, p, "b01")
	b.SetHealthy(true)
	res, err := p.Pick(&balance.Request{})
	if err != nil || res.Backend != b {
		t.Fatalf("after b01 passed: got %v, %v; want b01", res.Backend, err)
	}
}

// UpdateLeft names every backend that left, a changed address included;
// Retired keeps the ones that still hold connections visible until they
// close; a backend that rejoins is no longer marked draining.
func TestUpdateLeftAndRetired(t *testing.T) {
	p := newPool(t, balance.PoolOptions{Name: "p"}, members(3)...)
	b0, b1, b2 := byID(t, p, "b00"), byID(t, p, "b01"), byID(t, p, "b02")
	b1.Acquire()
	b2.Acquire()
	next := members(3)[:2]
	next[1].Addr = "10.9.9.9:8080" // b01 moves: the old b01 left
	left, err := p.UpdateLeft(next)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != b1 || left[1] != b2 {
		t.Fatalf("left: got %v, want the old b01 and b02", left)
	}
	if got := p.Retired(); len(got) != 2 || got[0] != b1 || got[1] != b2 {
		t.Fatalf("retired: got %v, want the old b01 and b02 (both hold a connection)", got)
	}
	if left, err := p.UpdateLeft(next); err != nil || len(left) != 0 {
		t.Fatalf("same members again: left %v, err %v; want none", left, err)
	}
	b2.SetDraining(time.Now().Add(time.Second))
	if _, ok := b2.Draining(); !ok {
		t.Fatal("b02 not draining after SetDraining")
	}
	if _, err := p.UpdateLeft(append(next, members(3)[2])); err != nil {
		t.Fatal(err)
	}
	if got := byID(t, p, "b02"); got != b2 {
		t.Fatalf("b02 rejoined as a new backend")
	}
	if _, ok := b2.Draining(); ok {
		t.Error("b02 still draining after it rejoined")
	}
	b1.Release()
	if got := p.Retired(); len(got) != 0 {
		t.Errorf("retired after the last connection closed: got %v, want none", got)
	}
	if _, ok := b0.Draining(); ok {
		t.Error("b00 draining though it never left")
	}
}

// TestSameSettings: the settings fixed at build are compared with their
// defaults applied; what a running pool can change is not compared.
func TestSameSettings(t *testing.T) {
	base := balance.PoolOptions{Name: "p", Mode: balance.ClientIP, BoundedLoad: 1.25, MinExcess: 64,
		Eject: balance.EjectOptions{Failures: 5, Window: time.Minute}}
	p, err := balance.NewPool(base)
	if err != nil {
		t.Fatal(err)
	}
	same := []func(*balance.PoolOptions){
		func(o *balance.PoolOptions) {},
		func(o *balance.PoolOptions) { o.BoundedLoad = 0 },                                      // the default is 1.25
		func(o *balance.PoolOptions) { o.MinExcess = 0 },                                        // the default is 64
		func(o *balance.PoolOptions) { o.Eject.Cooldown = balance.DefaultEjectCooldown },        // its default
		func(o *balance.PoolOptions) { o.Eject.MaxPercent = balance.DefaultMaxEjectionPercent }, // its default
		func(o *balance.PoolOptions) { o.Name, o.StartUnhealthy = "q", true },
		func(o *balance.PoolOptions) { o.Cookie.Keys = [][]byte{[]byte("0123456789abcdef")} },
	}
	for i, f := range same {
		o := base
		f(&o)
		if !p.SameSettings(o) {
			t.Errorf("same[%d] %+v: SameSettings false", i, o)
		}
	}
	differ := []func(*balance.PoolOptions){
		func(o *balance.PoolOptions) { o.Mode = balance.Cookie },
		func(o *balance.PoolOptions) { o.BoundedLoad = 2 },
		func(o *balance.PoolOptions) { o.MinExcess = balance.NoMinExcess },
		func(o *balance.PoolOptions) { o.MaxConnsPerBackend = 10 },
		func(o *balance.PoolOptions) { o.Eject.Failures = 3 },
		func(o *balance.PoolOptions) { o.Eject.Window = time.Second },
		func(o *balance.PoolOptions) { o.BoundedLoad = 0.5 }, // invalid: never the same
	}
	for i, f := range differ {
		o := base
		f(&o)
		if p.SameSettings(o) {
			t.Errorf("differ[%d] %+v: SameSettings true", i, o)
		}
	}
}

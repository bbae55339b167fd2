package balance_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/edgelb/edge/balance"
)

// TestAdminStateKeepsNewConnectionsAway: a drained or disabled backend is
// never picked, in any mode, and comes back when set ready.
func TestAdminStateKeepsNewConnectionsAway(t *testing.T) {
	for _, mode := range []balance.Mode{balance.LeastConn, balance.Cookie, balance.ClientIP} {
		for _, st := range []balance.AdminState{balance.AdminDrain, balance.AdminDisabled} {
			t.Run(mode.String()+"/"+st.String(), func(t *testing.T) {
				p := newPool(t, balance.PoolOptions{Mode: mode}, members(3)...)
				out := byID(t, p, "b01")
				cookie := out.CookieValue()
				if _, err := p.SetAdminState("b01", st); err != nil {
					t.Fatal(err)
				}
				if out.Available() || out.AdminState() != st {
					t.Fatalf("after %s: available %v, state %v", st, out.Available(), out.AdminState())
				}
				for i := range 200 {
					req := balance.Request{Cookie: cookie, ClientIP: addrN(i)}
					res, err := p.Pick(&req)
					if err != nil {
						t.Fatal(err)
					}
					if res.Backend == out {
						t.Fatalf("pick %d chose the %s backend", i, st)
					}
				}
				if _, err := p.SetAdminState("b01", balance.AdminReady); err != nil {
					t.Fatal(err)
				}
				req := balance.Request{Cookie: cookie}
				if res, err := p.Pick(&req); mode == balance.Cookie && (err != nil || res.Backend != out) {
					t.Errorf("ready again: cookie picked %v, %v; want b01", res.Backend, err)
				}
				if !out.Available() {
					t.Error("ready again: not available")
				}
			})
		}
	}
}

// TestAdminOverridesSurviveUpdates: operator state and weight outlive
// membership updates, a changed declared weight, and the member leaving
// and coming back as a new *Backend.
func TestAdminOverridesSurviveUpdates(t *testing.T) {
	p := newPool(t, balance.PoolOptions{}, members(3)...)
	if _, err := p.SetAdminState("b00", balance.AdminDisabled); err != nil {
		t.Fatal(err)
	}
	b, err := p.SetAdminWeight("b02", 7)
	if err != nil {
		t.Fatal(err)
	}
	if b.Weight() != 7 || b.DeclaredWeight() != 1 || !b.WeightOverridden() {
		t.Fatalf("after SetAdminWeight: weight %d declared %d overridden %v", b.Weight(), b.DeclaredWeight(), b.WeightOverridden())
	}
	ms := members(3)
	ms[2].Weight = 3
	if err := p.Update(ms); err != nil {
		t.Fatal(err)
	}
	if b := byID(t, p, "b02"); b.Weight() != 7 || b.DeclaredWeight() != 3 {
		t.Errorf("after an update declaring 3: weight %d declared %d, want 7 and 3", b.Weight(), b.DeclaredWeight())
	}
	if err := p.Update(members(3)[1:]); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(members(3)); err != nil {
		t.Fatal(err)
	}
	if b := byID(t, p, "b00"); b.AdminState() != balance.AdminDisabled || b.Available() {
		t.Errorf("member back after leaving: state %v available %v, want disabled", b.AdminState(), b.Available())
	}
	if b, err := p.SetAdminWeight("b02", 0); err != nil || b.Weight() != 1 || b.WeightOverridden() {
		t.Errorf("clearing the weight: %v, %v; want the declared 1", b, err)
	}
}

func TestAdminSettersRefuseUnknownAndOutOfRange(t *testing.T) {
	p := newPool(t, balance.PoolOptions{}, members(2)...)
	if _, err := p.SetAdminState("nope", balance.AdminDrain); !errors.Is(err, balance.ErrUnknownBackend) {
		t.Errorf("unknown id: got %v, want ErrUnknownBackend", err)
	}
	if _, err := p.SetAdminWeight("nope", 2); !errors.Is(err, balance.ErrUnknownBackend) {
		t.Errorf("unknown id: got %v, want ErrUnknownBackend", err)
	}
	for _, w := range []int{-1, balance.MaxWeight + 1} {
		if _, err := p.SetAdminWeight("b00", w); err == nil {
			t.Errorf("weight %d accepted", w)
		}
	}
	if _, err := p.SetAdminState("b00", balance.AdminState(9)); err == nil {
		t.Error("state 9 accepted")
	}
}

// TestAdminWeightSteersPicks: an operator weight moves the share of new
// connections as a declared one would.
func TestAdminWeightSteersPicks(t *testing.T) {
	p := newPool(t, balance.PoolOptions{}, members(2)...)
	if _, err := p.SetAdminWeight("b01", 9); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		res, err := p.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Backend.Acquire()
	}
	a, b := byID(t, p, "b00").Active(), byID(t, p, "b01").Active()
	if b < 5*a {
		t.Errorf("weights 1:9: b00 %d, b01 %d connections; want b01 far ahead", a, b)
	}
}

// addrN is the i-th of a range of client addresses.
func addrN(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}) }

// TestFleetLayerBeforeJoin: a fleet setting on an ID that is not a member
// yet is live in the snapshot that adds it, and the zero Override clears
// it; the layer refuses what no operator may set.
func TestFleetLayerBeforeJoin(t *testing.T) {
	fleet := balance.NewLayer()
	p := newPool(t, balance.PoolOptions{Fleet: fleet}, members(2)...)
	bs, err := fleet.Set("b02", balance.Override{State: balance.AdminDrain, Weight: 9})
	if err != nil || len(bs) != 0 {
		t.Fatalf("Set on a non-member: %v, %v; want no backend, nil", bs, err)
	}
	if err := p.Update(members(3)); err != nil {
		t.Fatal(err)
	}
	joined := byID(t, p, "b02")
	if joined.AdminState() != balance.AdminDrain || joined.Weight() != 9 || joined.Available() {
		t.Fatalf("joined: state %v weight %d available %v; want drain, 9, false", joined.AdminState(), joined.Weight(), joined.Available())
	}
	for i := range 100 {
		req := balance.Request{ClientIP: addrN(i)}
		if res, err := p.Pick(&req); err != nil || res.Backend == joined {
			t.Fatalf("pick %d: %v, %v; the drained joiner must not be picked", i, res.Backend, err)
		}
	}
	if _, err := fleet.Set("b02", balance.Override{}); err != nil {
		t.Fatal(err)
	}
	if joined.AdminState() != balance.AdminReady || joined.WeightOverridden() || !joined.Available() {
		t.Fatalf("cleared: state %v overridden %v available %v", joined.AdminState(), joined.WeightOverridden(), joined.Available())
	}
	for _, o := range []balance.Override{{State: balance.AdminState(7)}, {Weight: -1}, {Weight: balance.MaxWeight + 1}} {
		if _, err := fleet.Set("b00", o); err == nil {
			t.Errorf("Set(%+v) accepted", o)
		}
	}
}

// TestLocalDrainSurvivesFleetClear: the local operator's drain and the
// fleet's live in layers of their own, so clearing the fleet's action on
// a backend leaves the local drain in force, and the other way round;
// where both set the weight, the local one is in force.
func TestLocalDrainSurvivesFleetClear(t *testing.T) {
	fleet := balance.NewLayer()
	p := newPool(t, balance.PoolOptions{Fleet: fleet}, members(2)...)
	b := byID(t, p, "b00")
	if _, err := p.SetAdminState("b00", balance.AdminDrain); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Set("b00", balance.Override{State: balance.AdminDisabled, Weight: 5}); err != nil {
		t.Fatal(err)
	}
	if b.AdminState() != balance.AdminDrain || b.Weight() != 5 {
		t.Fatalf("both set: state %v weight %d; want the local drain and the fleet's weight 5", b.AdminState(), b.Weight())
	}
	if _, err := fleet.Set("b00", balance.Override{}); err != nil {
		t.Fatal(err)
	}
	if b.AdminState() != balance.AdminDrain || b.Available() {
		t.Fatalf("fleet cleared: state %v available %v; want the local drain kept", b.AdminState(), b.Available())
	}
	if _, err := fleet.Set("b00", balance.Override{State: balance.AdminDrain}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetAdminState("b00", balance.AdminReady); err != nil {
		t.Fatal(err)
	}
	if b.AdminState() != balance.AdminDrain || b.Available() {
		t.Fatalf("local cleared: state %v available %v; want the fleet's drain kept", b.AdminState(), b.Available())
	}
	if _, err := p.SetAdminWeight("b00", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Set("b00", balance.Override{State: balance.AdminDrain, Weight: 7}); err != nil {
		t.Fatal(err)
	}
	if b.Weight() != 3 {
		t.Fatalf("weight %d; want the local 3 over the fleet's 7", b.Weight())
	}
}

// TestFleetLayerAnyOrder: a pool built by a reload after the fleet's
// setting, and one built before it, both start their members with it, and
// a pool the reload replaced no longer follows the layer.
func TestFleetLayerAnyOrder(t *testing.T) {
	fleet := balance.NewLayer()
	before := newPool(t, balance.PoolOptions{Name: "chat", Fleet: fleet}, members(2)...)
	if _, err := fleet.Set("b01", balance.Override{State: balance.AdminDisabled}); err != nil {
		t.Fatal(err)
	}
	after := newPool(t, balance.PoolOptions{Name: "chat", Fleet: fleet}, members(2)...)
	for name, p := range map[string]*balance.Pool{"built before": before, "built after": after} {
		if b := byID(t, p, "b01"); b.AdminState() != balance.AdminDisabled || b.Available() {
			t.Errorf("%s the setting: b01 %v available %v; want disabled", name, b.AdminState(), b.Available())
		}
		if p.Layer(balance.Fleet) != fleet {
			t.Errorf("%s: the pool's fleet layer is not the one it was built with", name)
		}
	}
	if bs, _ := fleet.Set("b01", balance.Override{}); len(bs) != 2 {
		t.Errorf("clearing reached %d pools' members, want both live pools'", len(bs))
	}
}

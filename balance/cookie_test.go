package balance_test

import (
	"strings"
	"testing"

	"github.com/edgelb/edge/balance"
)

func cookiePool(t testing.TB, name string, keys ...[]byte) *balance.Pool {
	t.Helper()
	return newPool(t, balance.PoolOptions{Name: name, Mode: balance.Cookie, Cookie: balance.CookieOptions{Keys: keys}}, members(5)...)
}

func TestCookieSticky(t *testing.T) {
	p := cookiePool(t, "chat", keyA)
	for _, want := range p.Snapshot().Backends {
		for range 20 {
			// Load elsewhere must not pull a sticky client away.
			res := pick(t, p, balance.Request{Cookie: want.CookieValue()})
			if res.Backend != want || res.SetCookie {
				t.Fatalf("cookie of %s: got %s SetCookie=%v, want %s SetCookie=false", want.ID(), res.Backend.ID(), res.SetCookie, want.ID())
			}
			res.Backend.Acquire()
		}
	}
}

func TestCookieUnknownValuesRepick(t *testing.T) {
	p := cookiePool(t, "chat", keyA)
	valid := byID(t, p, "b02").CookieValue()
	otherPool := cookiePool(t, "other", keyA)
	otherKey := cookiePool(t, "chat", keyB)
	flip := []byte(valid)
	flip[3] ^= 1
	tests := []struct {
		name, cookie string
	}{
		{"empty", ""},
		{"garbage", "not-a-cookie"},
		{"backend id", "b02"},
		{"backend address", "10.0.0.3:8080"},
		{"one character changed", string(flip)},
		{"truncated", valid[:len(valid)-1]},
		{"extended", valid + "A"},
		{"padded base64", valid + "=="},
		{"upper-cased", strings.ToUpper(valid)},
		{"same id in another pool", byID(t, otherPool, "b02").CookieValue()},
		{"same id under an unknown key", byID(t, otherKey, "b02").CookieValue()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cookie == valid {
				t.Fatalf("test cookie %q is the valid value", tt.cookie)
			}
			if b, _ := p.Snapshot().LookupCookie(tt.cookie); b != nil {
				t.Fatalf("lookup %q: got %s, want nothing", tt.cookie, b.ID())
			}
			res := pick(t, p, balance.Request{Cookie: tt.cookie})
			if !res.SetCookie {
				t.Errorf("got SetCookie false, want true (a fresh cookie for the new pick)")
			}
		})
	}
}

func TestCookieKeyRotation(t *testing.T) {
	old := cookiePool(t, "chat", keyA)
	oldValue := byID(t, old, "b03").CookieValue()

	t.Run("new pool with the old key second", func(t *testing.T) {
		p := cookiePool(t, "chat", keyB, keyA)
		res := pick(t, p, balance.Request{Cookie: oldValue})
		if res.Backend.ID() != "b03" || !res.SetCookie {
			t.Fatalf("old-key cookie: got %s SetCookie=%v, want b03 SetCookie=true", res.Backend.ID(), res.SetCookie)
		}
		fresh := res.Backend.CookieValue()
		if fresh == oldValue {
			t.Fatalf("re-issued value equals the old one")
		}
		res = pick(t, p, balance.Request{Cookie: fresh})
		if res.Backend.ID() != "b03" || res.SetCookie {
			t.Errorf("re-issued cookie: got %s SetCookie=%v, want b03 SetCookie=false", res.Backend.ID(), res.SetCookie)
		}
	})
	t.Run("SetCookieKeys on a live pool", func(t *testing.T) {
		p := cookiePool(t, "chat", keyA)
		b := byID(t, p, "b03")
		b.Acquire()
		if err := p.SetCookieKeys([][]byte{keyB, keyA}); err != nil {
			t.Fatal(err)
		}
		if got := byID(t, p, "b03"); got != b || got.Active() != 1 {
			t.Errorf("rotation replaced the backend or its counters")
		}
		res := pick(t, p, balance.Request{Cookie: oldValue})
		if res.Backend != b || !res.SetCookie {
			t.Errorf("old-key cookie: got %s SetCookie=%v, want b03 SetCookie=true", res.Backend.ID(), res.SetCookie)
		}
		if b.CookieValue() == oldValue {
			t.Errorf("CookieValue not re-signed with the new primary key")
		}
		// Old key dropped: old cookies no longer name anything.
		if err := p.SetCookieKeys([][]byte{keyB}); err != nil {
			t.Fatal(err)
		}
		if got, _ := p.Snapshot().LookupCookie(oldValue); got != nil {
			t.Errorf("retired key still accepted")
		}
		if err := p.SetCookieKeys(nil); err == nil {
			t.Errorf("SetCookieKeys(nil): got nil error")
		}
	})
}

func TestCookieBackendUnusable(t *testing.T) {
	tests := []struct {
		name  string
		apply func(p *balance.Pool, b *balance.Backend) []*balance.Backend // returns Tried
	}{
		{"removed", func(p *balance.Pool, b *balance.Backend) []*balance.Backend {
			ms := members(5)
			if err := p.Update(append(ms[:1], ms[2:]...)); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{"unhealthy", func(_ *balance.Pool, b *balance.Backend) []*balance.Backend { b.SetHealthy(false); return nil }},
		{"tried", func(_ *balance.Pool, b *balance.Backend) []*balance.Backend { return []*balance.Backend{b} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := cookiePool(t, "chat", keyA)
			b := byID(t, p, "b01")
			value := b.CookieValue()
			tried := tt.apply(p, b)
			res := pick(t, p, balance.Request{Cookie: value, Tried: tried})
			if res.Backend == b || !res.SetCookie {
				t.Errorf("got %s SetCookie=%v, want another backend and SetCookie=true", res.Backend.ID(), res.SetCookie)
			}
		})
	}
}

func TestCookieValues(t *testing.T) {
	p := cookiePool(t, "chat", keyA)
	twin := cookiePool(t, "chat", keyA)
	seen := map[string]bool{}
	for _, b := range p.Snapshot().Backends {
		v := b.CookieValue()
		if len(v) != balance.CookieLen {
			t.Errorf("%s: got length %d, want %d", b.ID(), len(v), balance.CookieLen)
		}
		if strings.Trim(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Errorf("%s: %q is not unpadded base64url", b.ID(), v)
		}
		if strings.Contains(v, b.ID()) || strings.Contains(v, "10.0.0") {
			t.Errorf("%s: value %q leaks the id or address", b.ID(), v)
		}
		if seen[v] {
			t.Errorf("%s: value %q not unique", b.ID(), v)
		}
		seen[v] = true
		// Another edge with the same key and pool agrees (stickiness
		// across a fleet).
		if got := byID(t, twin, b.ID()).CookieValue(); got != v {
			t.Errorf("%s: twin pool got %q, want %q", b.ID(), got, v)
		}
	}
	// Without configured keys every pool has its own random key.
	r1 := newPool(t, balance.PoolOptions{Mode: balance.Cookie}, members(1)...)
	r2 := newPool(t, balance.PoolOptions{Mode: balance.Cookie}, members(1)...)
	if byID(t, r1, "b00").CookieValue() == byID(t, r2, "b00").CookieValue() {
		t.Errorf("random keys: two pools issued the same value")
	}
}

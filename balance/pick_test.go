package balance_test

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"testing"

	"github.com/edgelb/edge/balance"
)

func TestPickModes(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.7")
	tests := []struct {
		name          string
		mode          balance.Mode
		req           balance.Request
		wantSetCookie bool
	}{
		{"least conn", balance.LeastConn, balance.Request{}, false},
		{"least conn ignores cookie", balance.LeastConn, balance.Request{Cookie: "x"}, false},
		{"cookie without cookie", balance.Cookie, balance.Request{}, true},
		{"client ip", balance.ClientIP, balance.Request{ClientIP: ip}, false},
		{"client ip without address", balance.ClientIP, balance.Request{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, balance.PoolOptions{Mode: tt.mode}, members(4)...)
			res := pick(t, p, tt.req)
			if res.Backend == nil {
				t.Fatal("got nil backend")
			}
			if res.SetCookie != tt.wantSetCookie {
				t.Errorf("SetCookie: got %v, want %v", res.SetCookie, tt.wantSetCookie)
			}
		})
	}
}

func TestPickNilRequest(t *testing.T) {
	p := newPool(t, balance.PoolOptions{Mode: balance.Cookie}, members(2)...)
	res, err := p.Pick(nil)
	if err != nil || res.Backend == nil || !res.SetCookie {
		t.Errorf("Pick(nil): got %+v, %v; want a backend with SetCookie", res, err)
	}
}

func TestPickSkipsUnusable(t *testing.T) {
	clock := balance.NewFakeClock()
	tests := []struct {
		name    string
		disable func(p *balance.Pool, b *balance.Backend) // makes b unusable
		tried   bool                                      // or lists it in Tried
	}{
		{"unhealthy", func(_ *balance.Pool, b *balance.Backend) { b.SetHealthy(false) }, false},
		{"ejected", func(_ *balance.Pool, b *balance.Backend) { b.ReportFailure() }, false},
		{"at connection limit", func(_ *balance.Pool, b *balance.Backend) { b.Acquire(); b.Acquire() }, false},
		{"tried", func(*balance.Pool, *balance.Backend) {}, true},
	}
	for _, mode := range []balance.Mode{balance.LeastConn, balance.Cookie, balance.ClientIP} {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				p := newPool(t, balance.PoolOptions{
					Mode:               mode,
					MaxConnsPerBackend: 2,
					Eject:              balance.EjectOptions{Failures: 1, MaxPercent: 100}, // two of three out
					Now:                clock.Now,
				}, members(3)...)
				s := p.Snapshot()
				var tried []*balance.Backend
				// Take out b00, then b01 as well: picks land only on the rest.
				for i := range 2 {
					bad := s.Backends[i]
					if tt.tried {
						tried = append(tried, bad)
					} else {
						tt.disable(p, bad)
					}
					for _, ip := range clientIPs(200, false, 1) {
						req := balance.Request{ClientIP: ip, Cookie: bad.CookieValue(), Tried: tried}
						res := pick(t, p, req)
						for _, b := range s.Backends[:i+1] {
							if res.Backend == b {
								t.Fatalf("picked %s, which is %s", b.ID(), tt.name)
							}
						}
						if mode == balance.Cookie && !res.SetCookie {
							t.Fatalf("cookie named an unusable backend: got SetCookie false, want true")
						}
					}
				}
				// Then the last one: nothing is left.
				if tt.tried {
					tried = append(tried, s.Backends[2])
				} else {
					tt.disable(p, s.Backends[2])
				}
				res, err := p.Pick(&balance.Request{ClientIP: netip.MustParseAddr("192.0.2.1"), Tried: tried})
				if tt.name == "ejected" {
					// Ejection never takes the last available backend.
					if err != nil || res.Backend != s.Backends[2] || s.Backends[2].Ejected() {
						t.Errorf("last available after failures: got %v, %v; want it picked, not ejected", res.Backend, err)
					}
					return
				}
				if !errors.Is(err, balance.ErrNoBackend) {
					t.Errorf("nothing usable: got %v, want ErrNoBackend", err)
				}
			})
		}
	}
}

func TestPickEmptyPool(t *testing.T) {
	for _, mode := range []balance.Mode{balance.LeastConn, balance.Cookie, balance.ClientIP} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPool(t, balance.PoolOptions{Mode: mode})
			_, err := p.Pick(&balance.Request{ClientIP: netip.MustParseAddr("192.0.2.1")})
			if !errors.Is(err, balance.ErrNoBackend) {
				t.Errorf("got %v, want ErrNoBackend", err)
			}
		})
	}
}

func TestPickSingleBackend(t *testing.T) {
	p := newPool(t, balance.PoolOptions{}, members(1)...)
	want := byID(t, p, "b00")
	want.Acquire() // load does not matter when there is no choice
	for range 10 {
		if got := pick(t, p, balance.Request{}).Backend; got != want {
			t.Fatalf("got %v, want %v", got.ID(), want.ID())
		}
	}
}

func TestTryAcquire(t *testing.T) {
	p := newPool(t, balance.PoolOptions{MaxConnsPerBackend: 2}, members(1)...)
	b := byID(t, p, "b00")
	got := []bool{b.TryAcquire(), b.TryAcquire(), b.TryAcquire()}
	if want := []bool{true, true, false}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("TryAcquire x3: got %v, want %v", got, want)
	}
	if b.Available() {
		t.Errorf("Available at the limit: got true, want false")
	}
	b.Release()
	if !b.Available() || !b.TryAcquire() {
		t.Errorf("after Release: want Available and TryAcquire to succeed")
	}
}

func TestLeastConnPrefersLessLoaded(t *testing.T) {
	tests := []struct {
		name   string
		active []int64
		never  string // a backend P2C can never choose: it loses every pair
	}{
		{"two backends", []int64{10, 0}, "b00"},
		{"three backends", []int64{5, 50, 6}, "b01"},
		{"five backends", []int64{3, 3, 3, 9, 3}, "b03"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, balance.PoolOptions{}, members(len(tt.active))...)
			for i, b := range p.Snapshot().Backends {
				for range tt.active[i] {
					b.Acquire()
				}
			}
			for range 2000 {
				if got := pick(t, p, balance.Request{}).Backend.ID(); got == tt.never {
					t.Fatalf("picked %s, the most loaded backend", got)
				}
			}
		})
	}
}

func TestLeastConnSpreadsEvenly(t *testing.T) {
	p := newPool(t, balance.PoolOptions{}, members(5)...)
	for range 1000 {
		pick(t, p, balance.Request{}).Backend.Acquire()
	}
	for _, b := range p.Snapshot().Backends {
		// P2C with every connection long-lived keeps loads within a couple
		// of connections of each other.
		if got := b.Active(); got < 195 || got > 205 {
			t.Errorf("%s: got %d active, want 200±5", b.ID(), got)
		}
	}
}

// TestWeightsHonouredManyBackends: with ten backends, one of weight 10, the
// heavy one gets its 10/19 share; uniform candidate draws would cap it near
// 2/10.
func TestWeightsHonouredManyBackends(t *testing.T) {
	var ms []balance.Member
	for i := range 9 {
		ms = append(ms, balance.Member{ID: fmt.Sprintf("light%d", i), Addr: fmt.Sprintf("10.0.1.%d:80", i+1), Weight: 1})
	}
	ms = append(ms, balance.Member{ID: "heavy", Addr: "10.0.1.100:80", Weight: 10})
	p := newPool(t, balance.PoolOptions{}, ms...)
	const n = 50_000
	for range n {
		res, err := p.Pick(&balance.Request{})
		if err != nil {
			t.Fatal(err)
		}
		res.Backend.Acquire()
	}
	for _, b := range p.Snapshot().Backends {
		want := 1.0 / 19
		if b.ID() == "heavy" {
			want = 10.0 / 19
		}
		if got := float64(b.Active()) / n; math.Abs(got-want) > 0.01 {
			t.Errorf("%s: got share %.4f, want %.4f±0.01", b.ID(), got, want)
		}
	}
}

func TestWeightsHonoured(t *testing.T) {
	ms := []balance.Member{
		{ID: "w1", Addr: "10.0.0.1:80", Weight: 1},
		{ID: "w2", Addr: "10.0.0.2:80", Weight: 2},
		{ID: "w5", Addr: "10.0.0.3:80", Weight: 5},
	}
	const n = 80_000
	want := map[string]float64{"w1": 1.0 / 8, "w2": 2.0 / 8, "w5": 5.0 / 8}

	t.Run("least conn", func(t *testing.T) {
		p := newPool(t, balance.PoolOptions{}, ms...)
		for range n {
			res, err := p.Pick(&balance.Request{})
			if err != nil {
				t.Fatal(err)
			}
			res.Backend.Acquire()
		}
		for _, b := range p.Snapshot().Backends {
			got := float64(b.Active()) / n
			if math.Abs(got-want[b.ID()]) > 0.01 {
				t.Errorf("%s: got share %.4f, want %.4f±0.01", b.ID(), got, want[b.ID()])
			}
		}
	})
	t.Run("client ip", func(t *testing.T) {
		p := newPool(t, balance.PoolOptions{Mode: balance.ClientIP}, ms...)
		counts := map[string]int{}
		for _, ip := range clientIPs(n, false, 7) {
			counts[place(t, p, ip)]++
		}
		for id, w := range want {
			got := float64(counts[id]) / n
			if math.Abs(got-w) > 0.01 {
				t.Errorf("%s: got share %.4f, want %.4f±0.01", id, got, w)
			}
		}
	})
}

package balance_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// pickCases are the Pick paths a connection can take; each must be free of
// allocation.
func pickCases(tb testing.TB) []struct {
	name string
	pool *balance.Pool
	req  balance.Request
} {
	tb.Helper()
	lc := newPool(tb, balance.PoolOptions{Mode: balance.LeastConn}, members(10)...)
	ck := newPool(tb, balance.PoolOptions{Mode: balance.Cookie, Cookie: balance.CookieOptions{Keys: [][]byte{keyA, keyB}}}, members(10)...)
	old := newPool(tb, balance.PoolOptions{Mode: balance.Cookie, Cookie: balance.CookieOptions{Keys: [][]byte{keyB}}}, members(10)...)
	ip := newPool(tb, balance.PoolOptions{Mode: balance.ClientIP}, members(10)...)
	wms := members(10)
	wms[3].Weight = 4
	wip := newPool(tb, balance.PoolOptions{Mode: balance.ClientIP}, wms...)
	lim := newPool(tb, balance.PoolOptions{MaxConnsPerBackend: 1}, members(10)...)
	byID(tb, lim, "b01").Acquire()
	clock := balance.NewFakeClock()
	ej := newPool(tb, balance.PoolOptions{Eject: balance.EjectOptions{Failures: 1}, Now: clock.Now}, members(10)...)
	byID(tb, ej, "b02").ReportFailure()
	adm := newPool(tb, balance.PoolOptions{Mode: balance.ClientIP}, members(10)...)
	if _, err := adm.SetAdminState("b03", balance.AdminDrain); err != nil {
		tb.Fatal(err)
	}
	if _, err := adm.SetAdminWeight("b04", 5); err != nil {
		tb.Fatal(err)
	}
	rampMembers := members(10)
	rampMembers[5].Since = clock.Now()
	ramp := newPool(tb, balance.PoolOptions{SlowStart: time.Minute, Now: clock.Now}, rampMembers...)
	rampIP := newPool(tb, balance.PoolOptions{Mode: balance.ClientIP, SlowStart: time.Minute, Now: clock.Now}, rampMembers...)
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	tried := []*balance.Backend{byID(tb, lc, "b00"), byID(tb, lc, "b01")}
	ipTried := []*balance.Backend{byID(tb, ip, "b00"), byID(tb, ip, "b05")}
	return []struct {
		name string
		pool *balance.Pool
		req  balance.Request
	}{
		{"least_conn", lc, balance.Request{}},
		{"least_conn tried", lc, balance.Request{Tried: tried}},
		{"least_conn at limit", lim, balance.Request{}},
		{"least_conn ejected", ej, balance.Request{}},
		{"cookie hit", ck, balance.Request{Cookie: byID(tb, ck, "b04").CookieValue()}},
		{"cookie old key", ck, balance.Request{Cookie: byID(tb, old, "b04").CookieValue()}},
		{"cookie miss", ck, balance.Request{Cookie: "AAAAAAAAAAAAAAAAAAAAAA"}},
		{"cookie garbage", ck, balance.Request{Cookie: "garbage"}},
		{"cookie none", ck, balance.Request{}},
		{"client_ip v4", ip, balance.Request{ClientIP: v4}},
		{"client_ip v6", ip, balance.Request{ClientIP: v6}},
		{"client_ip weighted", wip, balance.Request{ClientIP: v4}},
		{"client_ip tried", ip, balance.Request{ClientIP: v4, Tried: ipTried}},
		{"admin drained and weighted", adm, balance.Request{ClientIP: v4}},
		{"admin drained least_conn", adm, balance.Request{}},
		{"least_conn slow start", ramp, balance.Request{}},
		{"client_ip slow start", rampIP, balance.Request{ClientIP: v4}},
		{"no backend", newPool(tb, balance.PoolOptions{}), balance.Request{}},
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	for _, tc := range pickCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			got := testing.AllocsPerRun(1000, func() { _, _ = tc.pool.Pick(&req) })
			if got != 0 {
				t.Errorf("got %v allocations per Pick, want 0", got)
			}
		})
	}
}

func BenchmarkPick(b *testing.B) {
	for _, tc := range pickCases(b) {
		b.Run(tc.name, func(b *testing.B) {
			req := tc.req
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tc.pool.Pick(&req)
			}
		})
	}
}

func BenchmarkPickParallel(b *testing.B) {
	for _, mode := range []balance.Mode{balance.LeastConn, balance.ClientIP} {
		b.Run(mode.String(), func(b *testing.B) {
			// The default random source: newPool's seeded one is not
			// safe for concurrent use.
			p, err := balance.NewPool(balance.PoolOptions{Mode: mode})
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Update(members(10)); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := balance.Request{ClientIP: netip.MustParseAddr("192.0.2.1")}
				for pb.Next() {
					_, _ = p.Pick(&req)
				}
			})
		})
	}
}

func BenchmarkLimiterAdmit(b *testing.B) {
	l := balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 100, Rate: 1e9, Burst: 1e6})
	ip := netip.MustParseAddr("192.0.2.1")
	b.ReportAllocs()
	for b.Loop() {
		l.Admit(ip)
		l.Done(ip)
	}
}

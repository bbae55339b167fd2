package balance_test

import (
	"fmt"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

func TestLimiterConcurrency(t *testing.T) {
	l := balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 2})
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	admit := func(ip netip.Addr, want bool) {
		t.Helper()
		ok, retry := l.Admit(ip)
		if ok != want || retry != 0 {
			t.Fatalf("Admit(%v): got %v, %v; want %v, 0", ip, ok, retry, want)
		}
	}
	admit(a, true)
	admit(a, true)
	admit(a, false)
	admit(b, true) // other clients are unaffected
	l.Done(a)
	admit(a, true)
	admit(a, false)
	l.Done(a)
	l.Done(a)
	l.Done(b)
	if got := l.EntriesForTest(); got != 0 {
		t.Errorf("entries after all Done: got %d, want 0", got)
	}
	l.Done(a) // unmatched Done is harmless
}

func TestLimiterRate(t *testing.T) {
	clock := balance.NewFakeClock()
	l := balance.NewLimiter(balance.LimiterOptions{Rate: 2, Burst: 3, Now: clock.Now})
	ip := netip.MustParseAddr("2001:db8::5")
	steps := []struct {
		advance   time.Duration
		wantOK    bool
		wantRetry time.Duration
	}{
		{0, true, 0}, {0, true, 0}, {0, true, 0}, // the burst
		{0, false, time.Second},                      // 0.5 s to a token, rounded up
		{400 * time.Millisecond, false, time.Second}, // 0.8 tokens
		{100 * time.Millisecond, true, 0},            // 1 token
		{0, false, time.Second},
		{10 * time.Second, true, 0}, // refilled to the burst, not beyond
		{0, true, 0},
		{0, true, 0},
		{0, false, time.Second},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		ok, retry := l.Admit(ip)
		if ok != s.wantOK || retry != s.wantRetry {
			t.Fatalf("step %d: got %v, %v; want %v, %v", i, ok, retry, s.wantOK, s.wantRetry)
		}
	}
}

func TestLimiterRetryAfter(t *testing.T) {
	tests := []struct {
		rate float64
		want time.Duration
	}{
		{10, time.Second},
		{1, time.Second},
		{0.5, 2 * time.Second},
		{0.1, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.rate), func(t *testing.T) {
			l := balance.NewLimiter(balance.LimiterOptions{Rate: tt.rate, Burst: 1, Now: balance.NewFakeClock().Now})
			ip := netip.MustParseAddr("192.0.2.9")
			l.Admit(ip)
			if ok, got := l.Admit(ip); ok || got != tt.want {
				t.Errorf("got %v, %v; want false, %v", ok, got, tt.want)
			}
		})
	}
}

func TestLimiterForgetsIdleClients(t *testing.T) {
	clock := balance.NewFakeClock()
	l := balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 5, Rate: 1, Burst: 1, Now: clock.Now})
	ip := netip.MustParseAddr("192.0.2.1")
	if ok, _ := l.Admit(ip); !ok {
		t.Fatal("first Admit refused")
	}
	l.Done(ip)
	if got := l.EntriesForTest(); got != 1 {
		t.Errorf("bucket not full yet: got %d entries, want 1", got)
	}
	clock.Advance(time.Second)
	l.Admit(ip)
	clock.Advance(time.Second)
	l.Done(ip)
	if got := l.EntriesForTest(); got != 0 {
		t.Errorf("idle client: got %d entries, want 0", got)
	}

	// Clients seen once and never again are swept as new ones arrive.
	for i := range 100_000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if ok, _ := l.Admit(ip); !ok {
			t.Fatalf("Admit(%v) refused", ip)
		}
		l.Done(ip)
		clock.Advance(time.Millisecond)
	}
	// At most about one second's worth of clients has a bucket still
	// refilling, plus what the amortised sweep leaves behind.
	if got := l.EntriesForTest(); got > 10_000 {
		t.Errorf("entries after 100,000 one-off clients: got %d, want bounded", got)
	}
}

func TestLimiterClientKeys(t *testing.T) {
	tests := []struct {
		name   string
		prefix int
		a, b   string
		same   bool
	}{
		{"mapped IPv4 is IPv4", 0, "192.0.2.1", "::ffff:192.0.2.1", true},
		{"IPv4 addresses differ", 0, "192.0.2.1", "192.0.2.2", false},
		{"IPv6 same /64", 0, "2001:db8:1:2::1", "2001:db8:1:2:ffff::9", true},
		{"IPv6 other /64", 0, "2001:db8:1:2::1", "2001:db8:1:3::1", false},
		{"IPv6 zone ignored", 128, "fe80::1%eth0", "fe80::1", true},
		{"IPv6 full address", 128, "2001:db8:1:2::1", "2001:db8:1:2::2", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 1, IPv6PrefixLen: tt.prefix})
			l.Admit(netip.MustParseAddr(tt.a))
			ok, _ := l.Admit(netip.MustParseAddr(tt.b))
			if got := !ok; got != tt.same {
				t.Errorf("counted as the same client: got %v, want %v", got, tt.same)
			}
		})
	}
}

func TestLimiterDisabled(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.1")
	for name, l := range map[string]*balance.Limiter{
		"nil":        nil,
		"zero":       balance.NewLimiter(balance.LimiterOptions{}),
		"negative":   balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: -1, Rate: -1}),
		"rate only":  balance.NewLimiter(balance.LimiterOptions{Rate: 1e9}),
		"conns only": balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 1 << 30}),
	} {
		t.Run(name, func(t *testing.T) {
			for range 1000 {
				if ok, _ := l.Admit(ip); !ok {
					t.Fatal("refused")
				}
			}
			l.Done(ip)
		})
	}
}

func TestLimiterConcurrentUse(t *testing.T) {
	l := balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 3, Rate: 1e6, Burst: 1000})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 2000 {
				ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(i % 16)})
				if ok, _ := l.Admit(ip); ok {
					l.Done(ip)
				}
			}
		})
	}
	wg.Wait()
	// With every connection done, only not-yet-refilled buckets remain.
	for i := range 16 {
		ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		for range 3 {
			if ok, _ := l.Admit(ip); !ok {
				t.Fatalf("%v refused after all connections were done", ip)
			}
		}
	}
}

// TestLimiterHold: a connection held for a client at its limit (handed
// over from another process) is counted without a refusal, and Done
// gives it back like any other.
func TestLimiterHold(t *testing.T) {
	l := balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 1})
	ip := netip.MustParseAddr("192.0.2.1")
	if ok, _ := l.Admit(ip); !ok {
		t.Fatal("first connection refused")
	}
	l.Hold(ip)
	l.Done(ip)
	if ok, _ := l.Admit(ip); ok {
		t.Fatal("admitted past the limit while a held connection is open")
	}
	l.Done(ip)
	if ok, _ := l.Admit(ip); !ok {
		t.Fatal("refused after every connection ended")
	}
}

// Testbalance.LimiterOptionsEqual: options that build the same limits are Equal,
// defaults applied; any limit that differs is not, and neither is the
// clock's absence or presence a difference.
func TestLimiterOptionsEqual(t *testing.T) {
	base := balance.LimiterOptions{MaxConnsPerIP: 10, Rate: 2.5, Burst: 5, IPv6PrefixLen: 56}
	for _, tc := range []struct {
		name string
		a, b balance.LimiterOptions
		want bool
	}{
		{"same", base, base, true},
		{"zero", balance.LimiterOptions{}, balance.LimiterOptions{}, true},
		{"burst 0 is ceil(rate)", balance.LimiterOptions{Rate: 2.5}, balance.LimiterOptions{Rate: 2.5, Burst: 3}, true},
		{"burst 0 at rate < 1 is 1", balance.LimiterOptions{Rate: 0.2}, balance.LimiterOptions{Rate: 0.2, Burst: 1}, true},
		{"prefix 0 is 64", balance.LimiterOptions{}, balance.LimiterOptions{IPv6PrefixLen: 64}, true},
		{"prefix out of range is 64", balance.LimiterOptions{IPv6PrefixLen: 200}, balance.LimiterOptions{IPv6PrefixLen: 64}, true},
		{"negative max conns is off", balance.LimiterOptions{MaxConnsPerIP: -1}, balance.LimiterOptions{}, true},
		{"burst without rate counts for nothing", balance.LimiterOptions{Burst: 9}, balance.LimiterOptions{}, true},
		{"infinite rate is off", balance.LimiterOptions{Rate: math.Inf(1)}, balance.LimiterOptions{}, true},
		{"clock", base, func() balance.LimiterOptions { o := base; o.Now = time.Now; return o }(), true},
		{"max conns", base, func() balance.LimiterOptions { o := base; o.MaxConnsPerIP = 11; return o }(), false},
		{"rate", base, func() balance.LimiterOptions { o := base; o.Rate = 2.6; return o }(), false},
		{"burst", base, func() balance.LimiterOptions { o := base; o.Burst = 6; return o }(), false},
		{"prefix", base, func() balance.LimiterOptions { o := base; o.IPv6PrefixLen = 64; return o }(), false},
		{"rate on", balance.LimiterOptions{}, balance.LimiterOptions{Rate: 1}, false},
	} {
		if got := tc.a.Equal(tc.b); got != tc.want {
			t.Errorf("%s: %+v.Equal(%+v) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.Equal(tc.a); got != tc.want {
			t.Errorf("%s: not symmetric", tc.name)
		}
	}
}

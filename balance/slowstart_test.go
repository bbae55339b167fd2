package balance_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// loadedPool is four warm backends holding held connections each, on a fake
// clock, with a reproducible random source.
func loadedPool(t *testing.T, mode balance.Mode, slowStart time.Duration, held int) (*balance.Pool, *balance.FakeClock, []*balance.Backend) {
	t.Helper()
	clock := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{Mode: mode, SlowStart: slowStart, Now: clock.Now}, members(4)...)
	var conns []*balance.Backend
	for _, b := range p.Snapshot().Backends {
		for range held {
			b.Acquire()
			conns = append(conns, b)
		}
	}
	return p, clock, conns
}

// join adds member b04 to p, as discovery does when it appears in Consul at
// since.
func join(t *testing.T, p *balance.Pool, since time.Time) *balance.Backend {
	t.Helper()
	ms := members(5)
	ms[4].Since = since
	if err := p.Update(ms); err != nil {
		t.Fatal(err)
	}
	return byID(t, p, "b04")
}

// churn closes n random connections of conns and places n new ones with
// least_conn picks, as clients reconnecting to a loaded pool do.
func churn(t *testing.T, p *balance.Pool, r *rand.Rand, conns []*balance.Backend, n int) {
	t.Helper()
	for range n {
		i := r.IntN(len(conns))
		conns[i].Release()
		conns[i] = pick(t, p, balance.Request{}).Backend
		conns[i].Acquire()
	}
}

// TestSlowStartLeastConnRamps: a backend joining a loaded least_conn pool
// takes a share of the pool's connections that grows with the ramp, not
// every new connection until it has caught up.
func TestSlowStartLeastConnRamps(t *testing.T) {
	const held, slow = 100, 60 * time.Second
	mean := func(p *balance.Pool) float64 {
		var sum int64
		bs := p.Snapshot().Backends
		for _, b := range bs {
			sum += b.Active()
		}
		return float64(sum) / float64(len(bs))
	}

	t.Run("without slow start the new backend is flooded", func(t *testing.T) {
		p, clock, conns := loadedPool(t, balance.LeastConn, 0, held)
		nb := join(t, p, clock.Now())
		churn(t, p, rand.New(rand.NewPCG(3, 4)), conns, 60)
		// It wins every comparison it is drawn into (two of five
		// backends per pick): twice its fair fifth.
		t.Logf("without slow start: the new backend took %d of 60 new connections (its fair share: 12)", nb.Active())
		if got := nb.Active(); got < 18 {
			t.Fatalf("new backend took %d of 60 new connections; expected the flood this test is about (at least 18)", got)
		}
	})

	p, clock, conns := loadedPool(t, balance.LeastConn, slow, held)
	r := rand.New(rand.NewPCG(3, 4))
	nb := join(t, p, clock.Now())
	if got := nb.SlowStartShare(); got != 0.1 {
		t.Fatalf("share at join = %v, want 0.1", got)
	}
	churn(t, p, r, conns, 60)
	// At 10 % of its weight it stops at about a tenth of the others' load.
	if got, limit := float64(nb.Active()), 0.1*mean(p)+3; got > limit {
		t.Fatalf("right after joining: new backend holds %v connections, want at most %.1f (10%% of the mean %.1f, +3)", got, limit, mean(p))
	}
	t.Logf("t=0s share 0.100: new backend %d connections, mean %.1f", nb.Active(), mean(p))
	prev := nb.Active()
	for sec := 1; sec <= 70; sec++ {
		clock.Advance(time.Second)
		churn(t, p, r, conns, 40)
		share := nb.SlowStartShare()
		want := share * mean(p)
		got := float64(nb.Active())
		if got > want*1.15+3 {
			t.Fatalf("t=%ds share %.3f: new backend holds %v, want at most %.1f", sec, share, got, want*1.15+3)
		}
		if sec%10 == 0 {
			t.Logf("t=%ds share %.3f: new backend %d connections, mean %.1f", sec, share, nb.Active(), mean(p))
			if got < want*0.7 {
				t.Fatalf("t=%ds share %.3f: new backend holds %v, want at least %.1f (the ramp is not taken)", sec, share, got, want*0.7)
			}
			if nb.Active() < prev {
				t.Fatalf("t=%ds: new backend went from %d to %d connections; the ramp only grows", sec, prev, nb.Active())
			}
			prev = nb.Active()
		}
	}
	if got := nb.SlowStartShare(); got != 1 {
		t.Fatalf("after the ramp: share %v, want 1", got)
	}
	if _, ok := nb.SlowStart(); ok {
		t.Fatal("after the ramp: still ramping")
	}
}

// TestSlowStartClientIPRamps: with client_ip the share of new clients
// hashed to a joining backend grows with the ramp, and two pools (two
// edges) with the same members and the same join time choose alike for
// every client, whenever each of them learned of the member.
func TestSlowStartClientIPRamps(t *testing.T) {
	const slow = 60 * time.Second
	clock := balance.NewFakeClock()
	joined := clock.Now()
	a := newPool(t, balance.PoolOptions{Mode: balance.ClientIP, SlowStart: slow, Now: clock.Now}, members(4)...)
	b := newPool(t, balance.PoolOptions{Mode: balance.ClientIP, SlowStart: slow, Now: clock.Now}, members(4)...)
	nbA := join(t, a, joined)
	clock.Advance(3 * time.Second) // b's watcher answers later
	nbB := join(t, b, joined)
	ips := clientIPs(4000, false, 9)
	frac := func(p *balance.Pool, nb *balance.Backend) float64 {
		n := 0
		for _, ip := range ips {
			if pick(t, p, balance.Request{ClientIP: ip}).Backend == nb {
				n++
			}
		}
		return float64(n) / float64(len(ips))
	}
	prev := 0.0
	for _, at := range []time.Duration{3 * time.Second, 20 * time.Second, 40 * time.Second, 59 * time.Second, 61 * time.Second} {
		clock.Advance(at - clock.Now().Sub(joined))
		if sa, sb := nbA.SlowStartShare(), nbB.SlowStartShare(); sa != sb {
			t.Fatalf("t=%v: shares differ between the pools: %v and %v", at, sa, sb)
		}
		for _, ip := range ips {
			if x, y := pick(t, a, balance.Request{ClientIP: ip}).Backend.ID(), pick(t, b, balance.Request{ClientIP: ip}).Backend.ID(); x != y {
				t.Fatalf("t=%v: client %v goes to %s on one pool, %s on the other", at, ip, x, y)
			}
		}
		share := nbA.SlowStartShare()
		got := frac(a, nbA)
		// Its hash share at full weight is 1/5; at share s of its weight,
		// s/(4+s).
		want := share / (4 + share)
		if got < want*0.8 || got > want*1.2 {
			t.Fatalf("t=%v share %.3f: %.3f of new clients go to the new backend, want about %.3f", at, share, got, want)
		}
		if got < prev {
			t.Fatalf("t=%v: fraction fell from %.3f to %.3f", at, prev, got)
		}
		prev = got
	}
}

// TestSlowStartSameRampWhoeverNoticesLater: the ramp runs from the join
// time the member carries, not from when a pool learned of it.
func TestSlowStartSameRampWhoeverNoticesLater(t *testing.T) {
	clock := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{SlowStart: 40 * time.Second, Now: clock.Now}, members(4)...)
	joined := clock.Now()
	clock.Advance(20 * time.Second)
	nb := join(t, p, joined)
	if got := nb.SlowStartShare(); got != 0.55 {
		t.Fatalf("20 s into a 40 s ramp: share %v, want 0.55", got)
	}
	until, ok := nb.SlowStart()
	if !ok || !until.Equal(joined.Add(40*time.Second)) {
		t.Fatalf("SlowStart() = %v, %v; want %v, true", until, ok, joined.Add(40*time.Second))
	}
	// The same join time again (every later answer carries it) restarts
	// nothing.
	clock.Advance(10 * time.Second)
	join(t, p, joined)
	if got := nb.SlowStartShare(); got != 0.775 {
		t.Fatalf("30 s into a 40 s ramp: share %v, want 0.775", got)
	}
	// A join time older than the ramp: warm at once.
	old := newPool(t, balance.PoolOptions{SlowStart: 40 * time.Second, Now: clock.Now}, members(4)...)
	if got := join(t, old, joined.Add(-time.Minute)).SlowStartShare(); got != 1 {
		t.Fatalf("member that joined before the ramp: share %v, want 1", got)
	}
}

// TestSlowStartOnReturn: a backend coming back from passive ejection or
// from a failing active check ramps again; members present from the start,
// and a new one's first passing check, do not.
func TestSlowStartOnReturn(t *testing.T) {
	const slow = 30 * time.Second
	clock := balance.NewFakeClock()
	p := newPool(t, balance.PoolOptions{
		SlowStart:      slow,
		Now:            clock.Now,
		StartUnhealthy: true,
		Eject:          balance.EjectOptions{Failures: 1, Cooldown: 10 * time.Second},
	}, members(4)...)
	for _, b := range p.Snapshot().Backends {
		b.SetHealthy(true)
		if got := b.SlowStartShare(); got != 1 {
			t.Fatalf("%s: first passing check of a member present from the start: share %v, want 1", b.ID(), got)
		}
	}

	b := byID(t, p, "b01")
	b.SetHealthy(false)
	clock.Advance(time.Minute)
	b.SetHealthy(true)
	if got := b.SlowStartShare(); got != 0.1 {
		t.Fatalf("back from a failing check: share %v, want 0.1", got)
	}
	clock.Advance(slow)
	if got := b.SlowStartShare(); got != 1 {
		t.Fatalf("after the ramp: share %v, want 1", got)
	}

	e := byID(t, p, "b02")
	e.ReportFailure()
	if !e.Ejected() {
		t.Fatal("not ejected")
	}
	clock.Advance(10 * time.Second)
	if e.Ejected() {
		t.Fatal("still ejected after the cooldown")
	}
	if got := e.SlowStartShare(); got != 0.1 {
		t.Fatalf("back from ejection: share %v, want 0.1", got)
	}
	clock.Advance(slow / 2)
	if got := e.SlowStartShare(); got != 0.55 {
		t.Fatalf("half way: share %v, want 0.55", got)
	}

	// Off: nothing ramps.
	off := newPool(t, balance.PoolOptions{Now: clock.Now}, members(4)...)
	if got := join(t, off, clock.Now()).SlowStartShare(); got != 1 {
		t.Fatalf("slow start off: share %v, want 1", got)
	}
}

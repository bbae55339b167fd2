package balance_test

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// TestConcurrentUse runs picks, connection accounting, health flips,
// failures and membership updates at once; -race checks the rest.
func TestConcurrentUse(t *testing.T) {
	for _, mode := range []balance.Mode{balance.LeastConn, balance.Cookie, balance.ClientIP} {
		t.Run(mode.String(), func(t *testing.T) {
			clock := balance.NewFakeClock()
			p, err := balance.NewPool(balance.PoolOptions{
				Mode:               mode,
				MaxConnsPerBackend: 50,
				Eject:              balance.EjectOptions{Failures: 3, Window: time.Second, Cooldown: time.Second},
				Now:                clock.Now,
				Cookie:             balance.CookieOptions{Keys: [][]byte{keyA}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Update(members(8)); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 9))
					var held []*balance.Backend
					for i := range 2000 {
						s := p.Snapshot()
						req := balance.Request{ClientIP: netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i)})}
						if n := len(s.Backends); n > 0 {
							req.Cookie = s.Backends[r.IntN(n)].CookieValue()
						}
						res, err := p.Pick(&req)
						if errors.Is(err, balance.ErrNoBackend) {
							continue
						}
						if err != nil {
							t.Errorf("Pick: %v", err)
							return
						}
						if res.Backend.TryAcquire() {
							held = append(held, res.Backend)
						}
						switch r.IntN(10) {
						case 0:
							res.Backend.ReportFailure()
						case 1:
							res.Backend.ReportSuccess()
						case 2:
							res.Backend.SetHealthy(r.IntN(2) == 0)
						}
						if len(held) > 20 {
							held[0].Release()
							held = held[1:]
						}
					}
					for _, b := range held {
						b.Release()
					}
				})
			}
			wg.Go(func() {
				for i := range 300 {
					ms := members(8)
					ms[i%8].Weight = 1 + i%5
					if i%3 == 0 {
						ms = ms[:5]
					}
					if err := p.Update(ms); err != nil {
						t.Errorf("Update: %v", err)
					}
					if i%50 == 0 {
						if err := p.SetCookieKeys([][]byte{keyB, keyA}); err != nil {
							t.Errorf("SetCookieKeys: %v", err)
						}
					}
					clock.Advance(10 * time.Millisecond)
				}
			})
			wg.Wait()
			for _, b := range p.Snapshot().Backends {
				if got := b.Active(); got != 0 {
					t.Errorf("%s: got %d active after all releases, want 0", b.ID(), got)
				}
			}
		})
	}
}

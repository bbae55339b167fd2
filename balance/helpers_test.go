package balance_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/edgelb/edge/balance"
)

var (
	keyA = []byte("0123456789abcdef-key-A")
	keyB = []byte("0123456789abcdef-key-B")
)

// newPool builds a pool with members named by ids ("a" -> 10.0.0.1:80...)
// and a reproducible random source.
func newPool(t testing.TB, opts balance.PoolOptions, members ...balance.Member) *balance.Pool {
	t.Helper()
	p, err := balance.NewPool(opts)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	p.SetRandForTest(rand.New(rand.NewPCG(1, 2)).Uint64)
	if err := p.Update(members); err != nil {
		t.Fatalf("Update: %v", err)
	}
	return p
}

// members returns n equally weighted members b00, b01, ...
func members(n int) []balance.Member {
	ms := make([]balance.Member, n)
	for i := range ms {
		ms[i] = balance.Member{ID: fmt.Sprintf("b%02d", i), Addr: fmt.Sprintf("10.0.0.%d:8080", i+1)}
	}
	return ms
}

func byID(t testing.TB, p *balance.Pool, id string) *balance.Backend {
	t.Helper()
	b := p.Snapshot().ByID(id)
	if b == nil {
		t.Fatalf("no backend %q", id)
	}
	return b
}

// clientIPs returns n deterministic client addresses, IPv4 or IPv6.
func clientIPs(n int, v6 bool, seed uint64) []netip.Addr {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	out := make([]netip.Addr, n)
	for i := range out {
		if v6 {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			out[i] = netip.AddrFrom16(a)
		} else {
			var a [4]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			out[i] = netip.AddrFrom4(a)
		}
	}
	return out
}

func pick(t testing.TB, p *balance.Pool, req balance.Request) balance.Result {
	t.Helper()
	res, err := p.Pick(&req)
	if err != nil {
		t.Fatalf("Pick(%+v): %v", req, err)
	}
	return res
}

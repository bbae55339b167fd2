package balance_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/edgelb/edge/balance"
)

func ipPool(t testing.TB, bound float64, ms []balance.Member) *balance.Pool {
	t.Helper()
	return newPool(t, balance.PoolOptions{Mode: balance.ClientIP, BoundedLoad: bound}, ms...)
}

// place is pick for hot loops: t.Helper is too slow to call per client.
func place(t testing.TB, p *balance.Pool, ip netip.Addr) string {
	res, err := p.Pick(&balance.Request{ClientIP: ip})
	if err != nil {
		t.Fatalf("Pick(%v): %v", ip, err)
	}
	return res.Backend.ID()
}

func TestClientIPIndependentPoolsAgree(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", v6), func(t *testing.T) {
			t.Parallel()
			ms := members(7)
			ms[2].Weight = 3
			p1 := ipPool(t, 0, ms)
			// The second pool gets the members in another order.
			rev := make([]balance.Member, len(ms))
			for i, m := range ms {
				rev[len(ms)-1-i] = m
			}
			p2 := ipPool(t, 0, rev)
			for _, ip := range clientIPs(100_000, v6, 42) {
				if a, b := place(t, p1, ip), place(t, p2, ip); a != b {
					t.Fatalf("%v: pools disagree: %s vs %s", ip, a, b)
				}
			}
		})
	}
}

// placementDigest hashes the placement of 50,000 IPv4 and IPv6 clients.
func placementDigest(t testing.TB) string {
	ms := members(7)
	ms[2].Weight = 3
	p := ipPool(t, 0, ms)
	h := sha256.New()
	for _, v6 := range []bool{false, true} {
		for _, ip := range clientIPs(25_000, v6, 42) {
			fmt.Fprintln(h, place(t, p, ip))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestClientIPAgreesAcrossProcesses runs the placement in a second process:
// a per-process hash seed would make the digests differ.
func TestClientIPAgreesAcrossProcesses(t *testing.T) {
	if os.Getenv("EDGE_BALANCE_PRINT_DIGEST") == "1" {
		fmt.Println("digest", placementDigest(t))
		return
	}
	if testing.Short() {
		t.Skip("spawns a process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClientIPAgreesAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EDGE_BALANCE_PRINT_DIGEST=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, after, ok := strings.Cut(string(out), "digest ")
	if !ok {
		t.Fatalf("child printed no digest:\n%s", out)
	}
	got, want := strings.Fields(after)[0], placementDigest(t)
	if got != want {
		t.Errorf("child digest %s, want %s", got, want)
	}
}

// TestClientIPGolden pins the hash: a change here re-routes every sticky
// client of a fleet during a rolling upgrade, so it must be deliberate.
func TestClientIPGolden(t *testing.T) {
	p := ipPool(t, 0, members(10))
	tests := []struct{ ip, want string }{
		{"192.0.2.1", golden["192.0.2.1"]},
		{"198.51.100.77", golden["198.51.100.77"]},
		{"203.0.113.254", golden["203.0.113.254"]},
		{"10.1.2.3", golden["10.1.2.3"]},
		{"2001:db8::1", golden["2001:db8::1"]},
		{"2001:db8:ffff::abcd", golden["2001:db8:ffff::abcd"]},
		{"::ffff:192.0.2.1", golden["192.0.2.1"]}, // IPv4-mapped is the same client
		{"fe80::1%eth0", golden["fe80::1"]},       // the zone is not part of the client
		{"fe80::1", golden["fe80::1"]},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			if got := place(t, p, netip.MustParseAddr(tt.ip)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

var golden = map[string]string{
	"192.0.2.1":           "b06",
	"198.51.100.77":       "b08",
	"203.0.113.254":       "b06",
	"10.1.2.3":            "b09",
	"2001:db8::1":         "b03",
	"2001:db8:ffff::abcd": "b00",
	"fe80::1":             "b00",
}

func TestClientIPAddingBackendMovesFewClients(t *testing.T) {
	for _, n := range []int{3, 5, 10} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("N=%d/ipv6=%v", n, v6), func(t *testing.T) {
				t.Parallel()
				before := ipPool(t, 0, members(n))
				after := ipPool(t, 0, members(n+1))
				newID := members(n + 1)[n].ID
				const clients = 20_000
				moved := 0
				for _, ip := range clientIPs(clients, v6, uint64(n)) {
					a, b := place(t, before, ip), place(t, after, ip)
					if a == b {
						continue
					}
					moved++
					if b != newID {
						t.Fatalf("%v moved %s -> %s, want moves only to the new backend %s", ip, a, b, newID)
					}
				}
				got, ideal := float64(moved)/clients, 1/float64(n+1)
				if got < 0.5*ideal || got > 1.5*ideal {
					t.Errorf("moved %.4f of clients, want about %.4f (between 0.5x and 1.5x)", got, ideal)
				}
			})
		}
	}
}

func TestClientIPRemovingBackendMovesOnlyItsClients(t *testing.T) {
	ms := members(6)
	before := ipPool(t, 0, ms)
	after := ipPool(t, 0, append(ms[:2:2], ms[3:]...)) // b02 removed
	for _, ip := range clientIPs(20_000, false, 3) {
		if a, b := place(t, before, ip), place(t, after, ip); a != b && a != "b02" {
			t.Fatalf("%v moved %s -> %s although %s stayed", ip, a, b, a)
		}
	}
}

// TestClientIPBoundedLoad: one hot address opens many connections; every
// backend stays within its bound, max(ceil(factor*share), ceil(share) +
// floor), and the hashed backend takes its part.
func TestClientIPBoundedLoad(t *testing.T) {
	const conns = 400
	weighted := []balance.Member{
		{ID: "big", Addr: "10.0.0.1:80", Weight: 3},
		{ID: "small1", Addr: "10.0.0.2:80"},
		{ID: "small2", Addr: "10.0.0.3:80"},
	}
	tests := []struct {
		name      string
		bound     float64
		minExcess int64
		ms        []balance.Member
		wantOnly  bool // every connection on one backend (no bound)
	}{
		{"default bound and floor", 0, 0, members(4), false},
		{"default bound, no floor", 0, balance.NoMinExcess, members(4), false},
		{"bound 2, no floor", 2, balance.NoMinExcess, members(4), false},
		{"bound 2, floor 10", 2, 10, members(4), false},
		{"weighted, no floor", 1.25, balance.NoMinExcess, weighted, false},
		{"weighted, default floor", 1.25, 0, weighted, false},
		{"floor above the load", 1.25, conns, members(4), true},
		{"unbounded", math.Inf(1), 0, members(4), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, balance.PoolOptions{Mode: balance.ClientIP, BoundedLoad: tt.bound, MinExcess: tt.minExcess}, tt.ms...)
			bound := tt.bound
			if bound == 0 {
				bound = balance.DefaultBoundedLoad
			}
			minExcess := tt.minExcess
			switch {
			case minExcess == 0:
				minExcess = balance.DefaultMinExcess
			case minExcess < 0:
				minExcess = 0
			}
			// One hot client (a NAT gateway, say) opens many connections.
			hot := netip.MustParseAddr("198.51.100.9")
			home := place(t, p, hot)
			for range conns {
				pick(t, p, balance.Request{ClientIP: hot}).Backend.Acquire()
			}
			wsum := 0
			for _, b := range p.Snapshot().Backends {
				wsum += b.Weight()
			}
			for _, b := range p.Snapshot().Backends {
				if tt.wantOnly {
					if b.ID() != home && b.Active() != 0 {
						t.Errorf("%s: got %d connections, want all on %s", b.ID(), b.Active(), home)
					}
					continue
				}
				limit := spillLimit(conns, b.Weight(), wsum, bound, minExcess)
				if got := b.Active(); got > limit {
					t.Errorf("%s: got %d connections, want at most %d", b.ID(), got, limit)
				}
				if b.ID() == home && b.Active() < limit-1 {
					t.Errorf("the hashed backend %s got %d, want it filled to its bound %d", home, b.Active(), limit)
				}
			}
		})
	}
}

func TestClientIPTriedFallsToNextInOrder(t *testing.T) {
	p := ipPool(t, 0, members(5))
	ip := netip.MustParseAddr("192.0.2.44")
	var tried []*balance.Backend
	seen := map[string]bool{}
	for range 5 {
		res := pick(t, p, balance.Request{ClientIP: ip, Tried: tried})
		if seen[res.Backend.ID()] {
			t.Fatalf("picked %s twice", res.Backend.ID())
		}
		seen[res.Backend.ID()] = true
		// Retries are deterministic too: an independent pool agrees.
		twin := ipPool(t, 0, members(5))
		var twinTried []*balance.Backend
		for _, b := range tried {
			twinTried = append(twinTried, byID(t, twin, b.ID()))
		}
		if got := pick(t, twin, balance.Request{ClientIP: ip, Tried: twinTried}).Backend.ID(); got != res.Backend.ID() {
			t.Fatalf("retry %d: twin picked %s, want %s", len(tried), got, res.Backend.ID())
		}
		tried = append(tried, res.Backend)
	}
}

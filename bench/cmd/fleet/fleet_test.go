package main

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/bench/internal/procfs"
	"github.com/edgelb/edge/bench/internal/reporttest"
)

func TestParseProcNetTCP(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4813 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4813 0200007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:A000 0100007F:4A39 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:A001 0100007F:4A39 06 00000000:00000000 03:00000F3B 00000000     0        0 0 3 0000000000000000
`
	got, err := parseProcNetTCP(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("parsed %d sockets, want 3 (TIME_WAIT has no inode): %v", len(got), got)
	}
	l := got[1001]
	if l.state != tcpListen || l.local != netip.MustParseAddrPort("127.0.0.1:18451") {
		t.Errorf("listener = %+v, want LISTEN on 127.0.0.1:18451", l)
	}
	c := got[1002]
	if c.state != tcpEstablished || c.remote != netip.MustParseAddrPort("127.0.0.2:40000") {
		t.Errorf("client socket = %+v, want ESTABLISHED from 127.0.0.2:40000", c)
	}
	if b := got[1003]; b.remote != netip.MustParseAddrPort("127.0.0.1:19001") {
		t.Errorf("backend socket = %+v, want peer 127.0.0.1:19001", b)
	}
	if _, err := parseProcNetTCP(strings.NewReader("header\n 0: 0100007F:4813\n")); err == nil {
		t.Error("a short line parsed without error")
	}
}

func TestSocketInode(t *testing.T) {
	tests := []struct {
		link string
		want uint64
		ok   bool
	}{
		{"socket:[12345]", 12345, true},
		{"pipe:[12345]", 0, false},
		{"/dev/null", 0, false},
		{"socket:[x]", 0, false},
	}
	for _, tt := range tests {
		n, ok := socketInode(tt.link)
		if n != tt.want || ok != tt.ok {
			t.Errorf("socketInode(%q) = %d, %v; want %d, %v", tt.link, n, ok, tt.want, tt.ok)
		}
	}
}

func TestSumMetric(t *testing.T) {
	const text = `# HELP edge_backend_active_connections Connections currently proxied to the backend.
# TYPE edge_backend_active_connections gauge
edge_backend_active_connections{address="127.0.0.1:19001",backend="b1",pool="echo"} 2381
edge_backend_active_connections{address="127.0.0.1:19002",backend="b2",pool="echo"} 2380
edge_backend_active_connections_other 7
edge_backend_active_connections{address="127.0.0.1:19003",backend="b3",pool="e}cho"} 2382
`
	v, found, err := sumMetric([]byte(text), activeMetric)
	if err != nil || !found || v != 7143 {
		t.Fatalf("sumMetric = %v, %v, %v; want 7143, true, nil", v, found, err)
	}
	if _, found, _ := sumMetric([]byte("go_goroutines 12\n"), activeMetric); found {
		t.Error("found a metric that is not there")
	}
	if v, found, err := sumMetric([]byte("x 3\nx{a=\"1\"} 4\n"), "x"); err != nil || !found || v != 7 {
		t.Errorf("sumMetric with and without labels = %v, %v, %v; want 7", v, found, err)
	}
}

func TestMakePlan(t *testing.T) {
	lim := limits{FDs: 20000, Ports: 28232}
	p, err := makePlan(50000, 7, 0, 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	if p.Gens != 3 || p.Backends != 3 || p.PerEdge != 7143 {
		t.Errorf("plan = %+v, want 3 generators, 3 backends, 7143 per edge", p)
	}
	if sum := p.PerGen[0] + p.PerGen[1] + p.PerGen[2]; sum != 50000 {
		t.Errorf("generators hold %d, want 50000", sum)
	}
	if _, err := makePlan(50000, 6, 0, 0, lim); err != nil {
		t.Errorf("6 edges: %v", err)
	}
	_, err = makePlan(50000, 5, 0, 0, lim)
	if err == nil || !strings.Contains(err.Error(), "use -edges 6 or more") {
		t.Errorf("5 edges: err = %v, want a refusal naming -edges 6", err)
	}
	_, err = makePlan(50000, 7, 2, 0, lim)
	if err == nil || !strings.Contains(err.Error(), "-generators") {
		t.Errorf("2 generators: err = %v, want a refusal naming -generators", err)
	}
	// A narrow port range asks for more backends.
	_, err = makePlan(50000, 7, 0, 3, limits{FDs: 20000, Ports: 10000})
	if err == nil || !strings.Contains(err.Error(), "ip_local_port_range") {
		t.Errorf("narrow port range: err = %v, want a refusal naming the port range", err)
	}
	if _, err := makePlan(0, 7, 0, 0, lim); err == nil {
		t.Error("0 connections accepted")
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 50000: "50,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRenderMarkdown(t *testing.T) {
	r := &Result{
		Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Stamp: "20261130-120000",
		Command: "bench/fleet.sh", Machine: Machine{Machine: procfs.Machine{NProc: 2, Model: "cpu", Kernel: "6.18", MemoryKB: 24 << 20, FDLimit: "20000/20000"}},
		Versions: map[string]string{"edge": "edge git-abc"}, Limits: limits{FDs: 20000, Ports: 28232},
		Plan: plan{Conns: 4, Edges: 2, Gens: 1, Backends: 3, PerGen: []int{4}, PerEdge: 2, PerBackend: 2},
		Edges: []EdgeRow{
			{Index: 1, Conns: 3, ClientSockets: 3, BackendSockets: 3, RSSStartKB: 1000, RSSSettledKB: 1030, Admin: "127.0.0.1:19901"},
			{Index: 2, Conns: 1, ClientSockets: 1, BackendSockets: 1, RSSStartKB: 1000, RSSSettledKB: 1010, Admin: "127.0.0.1:19902"},
		},
		EdgeGOMAXPROCS: 1, SettleS: 30,
	}
	r.check("every edge has its own listening socket", true, "2 of 2")
	r.total()
	if r.Totals.EdgeConns != 4 || r.Totals.EdgeRSSKB != 2040 || r.Totals.KiBPerConn != 510 || r.Totals.KiBPerConnAdded != 10 {
		t.Fatalf("totals = %+v", r.Totals)
	}
	if r.Totals.MinConns != 1 || r.Totals.MaxConns != 3 {
		t.Errorf("spread = %d..%d, want 1..3", r.Totals.MinConns, r.Totals.MaxConns)
	}
	md := renderMarkdown(r)
	reporttest.Contains(t, md,
		"# A fleet of edges on one port",
		"**4 connections, 2.0 MiB of edge RSS in all: 510.00 KiB per connection**",
		"- **Command:** `bench/fleet.sh`",
		"| **all** | | | **4** |",
		"- ok: every edge has its own listening socket (2 of 2)",
		"GOMAXPROCS=1",
		"bench/out/fleet-20261130-120000.json",
	)
	if err := r.failed(); err != nil {
		t.Errorf("failed() = %v with every check ok", err)
	}
	r.check("sums", false, "3 of 4")
	if err := r.failed(); err == nil || !strings.Contains(err.Error(), "3 of 4") {
		t.Errorf("failed() = %v, want the failed check", err)
	}
}

package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/edgelb/edge/bench/internal/stats"
)

// Limits the plan must fit in.
type limits struct {
	// FDs is RLIMIT_NOFILE of the orchestrator, which every child inherits
	// (the Go runtime raises its own soft limit to the hard one, so the
	// hard limit is what counts).
	FDs int
	// Ports is the size of net.ipv4.ip_local_port_range: how many
	// connections one source address can open to one destination.
	Ports int
}

// Headroom each process keeps besides its connections: listeners, the admin
// listener, logs, the epoll descriptor, pipes.
const fdReserve = 100

// Fractions of a limit a plan may use. The generators split the connections
// exactly; edges and backends get theirs from hashing, which is uneven.
const (
	genFill = 0.85
	// SO_REUSEPORT picks the listener by a hash of the 4-tuple, so edges
	// get a binomial share: at 50,000 over 7 edges the standard deviation
	// is about 80 connections; 15% covers any plausible run.
	hashMargin = 1.15
	// Edges balance least-connections over the backends, each on its own,
	// so a backend's count is within a few connections of the mean; the
	// ephemeral port range is the limit there, and the kernel searches it
	// for a free port, which slows down as it fills.
	portFill = 0.8
)

// plan is the placement of one run.
type plan struct {
	Conns    int   `json:"conns"`
	Edges    int   `json:"edges"`
	Gens     int   `json:"generators"`
	Backends int   `json:"backends"`
	PerGen   []int `json:"per_generator"`
	// PerEdge and PerBackend are the expected (mean) counts.
	PerEdge    int `json:"per_edge_expected"`
	PerBackend int `json:"per_backend_expected"`
}

// makePlan checks that conns connections fit edges edge processes under the
// limits and picks the number of generator and backend processes where they
// are 0. Every refusal says which flag to change.
func makePlan(conns, edges, gensN, backends int, lim limits) (plan, error) {
	if conns < 1 || edges < 1 || gensN < 0 || backends < 0 {
		return plan{}, fmt.Errorf("-conns and -edges must be positive, -generators and -backends at least 0 (0: as needed)")
	}
	usable := lim.FDs - fdReserve
	if usable < 2 {
		return plan{}, fmt.Errorf("descriptor limit %d leaves no room for connections", lim.FDs)
	}
	// Generators and backends hold one descriptor per connection.
	perOne := int(float64(usable) * genFill)
	if gensN == 0 {
		gensN = max(1, ceilDiv(conns, perOne))
	}
	if backends == 0 {
		backends = max(3, ceilDiv(conns, perOne))
	}
	p := plan{Conns: conns, Edges: edges, Gens: gensN, Backends: backends,
		PerGen: stats.Split(conns, gensN), PerEdge: ceilDiv(conns, edges), PerBackend: ceilDiv(conns, backends)}

	// An edge holds two descriptors per proxied connection.
	if need := int(math.Ceil(float64(p.PerEdge)*hashMargin)) * 2; need > usable {
		minEdges := ceilDiv(int(math.Ceil(float64(conns)*hashMargin))*2, usable)
		return p, fmt.Errorf("%d connections over %d edges is about %d per edge, 2 descriptors each: %d with the %.0f%% margin SO_REUSEPORT's hashing needs, over the %d the descriptor limit %d leaves; use -edges %d or more",
			conns, edges, p.PerEdge, need, (hashMargin-1)*100, usable, lim.FDs, minEdges)
	}
	if p.PerGen[0] > usable {
		return p, fmt.Errorf("%d connections per generator over the %d descriptors the limit %d leaves; use -generators %d or more",
			p.PerGen[0], usable, lim.FDs, ceilDiv(conns, perOne))
	}
	need := int(math.Ceil(float64(p.PerBackend) * 1.02))
	if need > usable {
		return p, fmt.Errorf("about %d connections per backend over the %d descriptors the limit %d leaves; use -backends %d or more",
			p.PerBackend, usable, lim.FDs, ceilDiv(conns, perOne))
	}
	// Every edge dials its backends from 127.0.0.1 without binding a port,
	// so all connections to one backend share one (source address,
	// destination) pair and need distinct ephemeral ports.
	if lim.Ports > 0 && need > int(float64(lim.Ports)*portFill) {
		return p, fmt.Errorf("about %d connections per backend from one source address need that many ephemeral ports, over %.0f%% of the %d in net.ipv4.ip_local_port_range; use -backends %d or more",
			p.PerBackend, portFill*100, lim.Ports, ceilDiv(conns, int(float64(lim.Ports)*portFill)))
	}
	return p, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// readLimits reads the descriptor limit and the ephemeral port range.
func readLimits() (limits, error) {
	var lim limits
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return lim, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	lim.FDs = int(min(rl.Max, math.MaxInt32))
	lo, hi, err := portRange()
	if err != nil {
		return lim, err
	}
	lim.Ports = hi - lo + 1
	return lim, nil
}

func portRange() (lo, hi int, err error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, fmt.Errorf("read ephemeral port range: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("parse ip_local_port_range %q", b)
	}
	if lo, err = strconv.Atoi(f[0]); err == nil {
		hi, err = strconv.Atoi(f[1])
	}
	if err != nil || hi < lo {
		return 0, 0, fmt.Errorf("parse ip_local_port_range %q", b)
	}
	return lo, hi, nil
}

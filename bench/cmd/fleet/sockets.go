package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/edgelb/edge/bench/internal/proc"
)

// TCP states as /proc/net/tcp prints them (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpListen      = 0x0A
)

// tcpSock is one line of /proc/net/tcp.
type tcpSock struct {
	local, remote netip.AddrPort
	state         uint8
	inode         uint64
}

// parseProcNetTCP returns the IPv4 TCP sockets of /proc/net/tcp by inode.
// Sockets in TIME_WAIT and the like have inode 0 and belong to no process;
// they are left out.
func parseProcNetTCP(r io.Reader) (map[uint64]tcpSock, error) {
	out := make(map[uint64]tcpSock)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		if first {
			first = false // the header line
			continue
		}
		f := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		if len(f) < 10 {
			return nil, fmt.Errorf("parse /proc/net/tcp line %q: %d fields, want at least 10", sc.Text(), len(f))
		}
		local, err := parseHexAddrPort(f[1])
		if err != nil {
			return nil, err
		}
		remote, err := parseHexAddrPort(f[2])
		if err != nil {
			return nil, err
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("parse /proc/net/tcp state %q: %w", f[3], err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse /proc/net/tcp inode %q: %w", f[9], err)
		}
		if inode == 0 {
			continue
		}
		out[inode] = tcpSock{local: local, remote: remote, state: uint8(st), inode: inode}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/net/tcp: %w", err)
	}
	return out, nil
}

// parseHexAddrPort parses "0100007F:4813": the address is the 32-bit word
// in the kernel's byte order (this machine's), the port is a plain number.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || len(a) != 8 {
		return netip.AddrPort{}, fmt.Errorf("parse /proc/net/tcp address %q: want 8 hex digits:port", s)
	}
	v, err := strconv.ParseUint(a, 16, 32)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("parse /proc/net/tcp address %q: %w", s, err)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("parse /proc/net/tcp port %q: %w", s, err)
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(v))
	return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(port)), nil
}

func readProcNetTCP() (map[uint64]tcpSock, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, fmt.Errorf("open /proc/net/tcp: %w", err)
	}
	defer func() { _ = f.Close() }()
	return parseProcNetTCP(f)
}

// socketInodes returns the inodes of the sockets pid holds, from the
// "socket:[N]" links in /proc/PID/fd.
func socketInodes(pid int) ([]uint64, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list fds of pid %d: %w", pid, err)
	}
	out := make([]uint64, 0, len(ents))
	seen := make(map[uint64]bool, len(ents))
	for _, e := range ents {
		l, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		// One socket, however many descriptors name it: edge keeps a
		// duplicate of each listening socket to hand to the binary of
		// an upgrade.
		if n, ok := socketInode(l); ok && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

func socketInode(link string) (uint64, bool) {
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "]")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// procSockets are the TCP sockets of one process, as seen by the kernel.
type procSockets struct {
	// Listening holds the inodes of the process's listening sockets on the
	// address being counted.
	Listening []uint64
	// Local counts established sockets whose local address is that address
	// (accepted connections); Remote counts established sockets whose peer
	// is one of the given addresses (dialled connections).
	Local, Remote int
}

// countSockets classifies the sockets of pid against table: listening on and
// accepted from local, and connected to any of peers.
func countSockets(table map[uint64]tcpSock, pid int, local netip.AddrPort, peers map[netip.AddrPort]bool) (procSockets, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return procSockets{}, err
	}
	var ps procSockets
	for _, n := range inodes {
		s, ok := table[n]
		if !ok {
			continue // not IPv4 TCP
		}
		switch {
		case s.state == tcpListen && s.local == local:
			ps.Listening = append(ps.Listening, n)
		case s.state == tcpEstablished && s.local == local:
			ps.Local++
		case s.state == tcpEstablished && peers[s.remote]:
			ps.Remote++
		}
	}
	return ps, nil
}

// activeMetric is edge's gauge of connections proxied to each backend
// (cmd/edge/internal/metrics/pools.go); its sum over backends is the edge's count of
// spliced WebSocket connections.
const activeMetric = "edge_backend_active_connections"

// sumMetric adds up every sample of the named metric in a Prometheus text
// exposition.
func sumMetric(text []byte, name string) (float64, bool, error) {
	var sum float64
	found := false
	for line := range bytes.SplitSeq(text, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte(name))
		if !ok || len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ') {
			continue // a comment, another metric, or one whose name only starts alike
		}
		if rest[0] == '{' {
			i := bytes.LastIndexByte(rest, '}')
			if i < 0 {
				return 0, false, fmt.Errorf("parse metric line %q: no closing brace", line)
			}
			rest = rest[i+1:]
		}
		f := strings.Fields(string(rest))
		if len(f) < 1 {
			return 0, false, fmt.Errorf("parse metric line %q: no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("parse metric line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, nil
}

// adminClient talks to the edges' admin listeners; no keep-alive, so the
// orchestrator holds no descriptor of theirs between readings.
var adminClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// activeConns reads an edge's proxied connections from its /metrics.
func activeConns(admin string) (int, error) {
	resp, err := adminClient.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", admin, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", admin, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: status %s", admin, resp.Status)
	}
	v, found, err := sumMetric(body, activeMetric)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", admin, err)
	}
	if !found {
		return 0, fmt.Errorf("scrape %s: no %s in /metrics", admin, activeMetric)
	}
	return int(v), nil
}

// ready polls an edge's /readyz until it answers 200.
func ready(p *proc.Proc, admin string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := adminClient.Get("http://" + admin + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if p.Exited() {
			return fmt.Errorf("%s exited before it was ready: %v (see its log)", p.Name, p.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready on %s after %v: %w", p.Name, admin, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

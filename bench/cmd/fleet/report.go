package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/edgelb/edge/bench/internal/procfs"
)

// Result is the JSON file one run writes.
type Result struct {
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	Command  string            `json:"command"`
	Machine  Machine           `json:"machine"`
	Versions map[string]string `json:"versions"`
	Limits   limits            `json:"limits"`
	Plan     plan              `json:"plan"`
	// Stamp names the output: bench/out/fleet-STAMP.json and the directory
	// bench/out/fleet-STAMP with the configurations and logs.
	Stamp string `json:"stamp"`
	Dir   string `json:"dir"`
	// Listen is the public address every edge listens on.
	Listen string `json:"listen"`
	// SettleS is the hold before the memory reading; EdgeGOMAXPROCS the
	// edges' GOMAXPROCS (0: the Go default).
	SettleS        float64 `json:"settle_s"`
	EdgeGOMAXPROCS int     `json:"edge_gomaxprocs"`
	// DurationS is the wall time of the whole run; ConnectS the time from
	// starting the generators to the last one reporting all connections up.
	DurationS float64 `json:"duration_s"`
	ConnectS  float64 `json:"connect_s"`
	// EdgeCPUPerConnUS is the edges' CPU time while connecting (full
	// TLS 1.3 handshake, backend dial, upgrade, one echo) per connection.
	EdgeCPUPerConnUS float64 `json:"edge_cpu_us_per_conn"`
	Cipher           string  `json:"cipher"`
	Curve            string  `json:"curve"`
	// ListenSockets counts the listening sockets on the public port.
	ListenSockets int       `json:"listen_sockets"`
	Edges         []EdgeRow `json:"edges"`
	Generators    []ProcRow `json:"generators"`
	Backends      []ProcRow `json:"backends"`
	// Echoed counts the connections whose echo after the hold came back.
	Echoed int     `json:"echoed"`
	Totals Totals  `json:"totals"`
	Checks []Check `json:"checks"`
	Error  string  `json:"error,omitempty"`
}

// Machine describes where the run happened: the benchmark's description
// (whose fields JSON flattens into this object) and the two network limits
// that bound a fleet.
type Machine struct {
	procfs.Machine
	PortRange string `json:"ip_local_port_range"`
	Somaxconn string `json:"somaxconn"`
}

// EdgeRow is one edge process.
type EdgeRow struct {
	Index int    `json:"index"`
	PID   int    `json:"pid"`
	Admin string `json:"admin"`
	// Conns is the sum of edge_backend_active_connections on its admin
	// /metrics; ClientSockets and BackendSockets count its established
	// sockets on the public port and towards the backends.
	Conns          int `json:"conns"`
	ClientSockets  int `json:"client_sockets"`
	BackendSockets int `json:"backend_sockets"`
	FDs            int `json:"fds"`
	// VmRSS before connecting, once every connection was up, after the
	// hold, and after the last echo.
	RSSStartKB     int64 `json:"rss_start_kb"`
	RSSConnectedKB int64 `json:"rss_connected_kb"`
	RSSSettledKB   int64 `json:"rss_settled_kb"`
	RSSEchoedKB    int64 `json:"rss_echoed_kb"`
}

// ProcRow is one generator or backend process.
type ProcRow struct {
	Name        string `json:"name"`
	PID         int    `json:"pid"`
	Addr        string `json:"addr,omitempty"`
	Conns       int    `json:"conns"`
	FDs         int    `json:"fds"`
	RSSKB       int64  `json:"rss_kb"`
	Errors      uint64 `json:"errors,omitempty"`
	ErrorSample string `json:"error_sample,omitempty"`
}

// Totals are the headline figures.
type Totals struct {
	EdgeConns         int     `json:"edge_conns"`
	EdgeRSSStartKB    int64   `json:"edge_rss_start_kb"`
	EdgeRSSConnKB     int64   `json:"edge_rss_connected_kb"`
	EdgeRSSKB         int64   `json:"edge_rss_settled_kb"`
	EdgeRSSEchoedKB   int64   `json:"edge_rss_echoed_kb"`
	KiBPerConn        float64 `json:"kib_per_conn"`
	KiBPerConnAdded   float64 `json:"kib_per_conn_added"`
	KiBPerConnEchoed  float64 `json:"kib_per_conn_echoed"`
	MinConns          int     `json:"min_conns_per_edge"`
	MaxConns          int     `json:"max_conns_per_edge"`
	GenRSSKB          int64   `json:"generators_rss_kb"`
	BackendRSSKB      int64   `json:"backends_rss_kb"`
	GenKiBPerConn     float64 `json:"generators_kib_per_conn"`
	BackendKiBPerConn float64 `json:"backends_kib_per_conn"`
}

// Check is one verification the run made.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func (r *Result) check(name string, ok bool, detail string) {
	r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: detail})
}

// failed returns the failed checks as one error.
func (r *Result) failed() error {
	var errs []error
	for _, c := range r.Checks {
		if !c.OK {
			errs = append(errs, fmt.Errorf("check failed: %s: %s", c.Name, c.Detail))
		}
	}
	return errors.Join(errs...)
}

// total fills Totals from the rows.
func (r *Result) total() {
	t := Totals{MinConns: -1}
	for _, e := range r.Edges {
		t.EdgeConns += e.Conns
		t.EdgeRSSStartKB += e.RSSStartKB
		t.EdgeRSSConnKB += e.RSSConnectedKB
		t.EdgeRSSKB += e.RSSSettledKB
		t.EdgeRSSEchoedKB += e.RSSEchoedKB
		if t.MinConns < 0 || e.Conns < t.MinConns {
			t.MinConns = e.Conns
		}
		t.MaxConns = max(t.MaxConns, e.Conns)
	}
	for _, g := range r.Generators {
		t.GenRSSKB += g.RSSKB
	}
	for _, b := range r.Backends {
		t.BackendRSSKB += b.RSSKB
	}
	if n := float64(r.Plan.Conns); n > 0 {
		t.KiBPerConn = float64(t.EdgeRSSKB) / n
		t.KiBPerConnAdded = float64(t.EdgeRSSKB-t.EdgeRSSStartKB) / n
		t.KiBPerConnEchoed = float64(t.EdgeRSSEchoedKB) / n
		t.GenKiBPerConn = float64(t.GenRSSKB) / n
		t.BackendKiBPerConn = float64(t.BackendRSSKB) / n
	}
	r.Totals = t
}

func mib(kb int64) string { return fmt.Sprintf("%.1f", float64(kb)/1024) }

// thousands formats n with comma separators.
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// summary is the short text printed at the end of a successful run.
func summary(r *Result) string {
	t := r.Totals
	return fmt.Sprintf("%s wss connections over %d edges (%s to %s each): edge RSS %s MiB in all, %.2f KiB per connection (%.2f KiB added by the connections); run took %.0f s, connecting %.0f s\n",
		thousands(t.EdgeConns), len(r.Edges), thousands(t.MinConns), thousands(t.MaxConns),
		mib(t.EdgeRSSKB), t.KiBPerConn, t.KiBPerConnAdded, r.DurationS, r.ConnectS)
}

// renderMarkdown writes docs/FLEET.md from one result.
func renderMarkdown(r *Result) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	t := r.Totals
	w("# A fleet of edges on one port\n\n")
	w("%s wss connections (TLS 1.3) held by %d edge processes that share one public address, %s, with `SO_REUSEPORT`, on one machine, over loopback. ",
		thousands(r.Plan.Conns), len(r.Edges), r.Listen)
	w("Generated by `bench/cmd/fleet` (see `bench/README.md`); the figures are `VmRSS` from `/proc/PID/status`.\n\n")
	w("**%s connections, %s MiB of edge RSS in all: %.2f KiB per connection** (%.2f KiB per connection above the edges' RSS before connecting).\n\n",
		thousands(t.EdgeConns), mib(t.EdgeRSSKB), t.KiBPerConn, t.KiBPerConnAdded)

	w("- **Date:** %s (UTC)\n", r.Started.Format("2006-01-02 15:04"))
	m := r.Machine
	w("- **Machine:** %d × %s, %.0f GiB, Linux %s, fd limit %s per process, ephemeral ports %s, somaxconn %s\n",
		m.NProc, m.Model, float64(m.MemoryKB)/(1<<20), m.Kernel, m.FDLimit, m.PortRange, m.Somaxconn)
	w("- **Versions:** %s\n", joinVersions(r.Versions))
	w("- **Command:** `%s`\n", r.Command)
	w("- **Time:** %.0f s in all; %.0f s to open the %s connections\n", r.DurationS, r.ConnectS, thousands(r.Plan.Conns))
	w("- **TLS:** %s, %s, ECDSA P-256 self-signed certificate; full handshakes\n\n", r.Cipher, r.Curve)

	w("## Edges\n\n")
	w("Connections are edge's own gauge (`%s` summed over backends on each admin `/metrics`); the socket columns count the established TCP sockets each edge process holds, from `/proc/net/tcp` and `/proc/PID/fd`. RSS is read before connecting, once every connection is up, after the hold and after one more echo on every connection.\n\n", activeMetric)
	w("| edge | pid | admin | connections | client sockets | backend sockets | descriptors | RSS before (MiB) | RSS connected (MiB) | **RSS after hold (MiB)** | RSS after echo (MiB) | KiB per connection |\n")
	w("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var client, backend, fds int
	for _, e := range r.Edges {
		client += e.ClientSockets
		backend += e.BackendSockets
		fds += e.FDs
		per := "—"
		if e.Conns > 0 {
			per = fmt.Sprintf("%.2f", float64(e.RSSSettledKB)/float64(e.Conns))
		}
		w("| %d | %d | %s | %s | %s | %s | %s | %s | %s | **%s** | %s | %s |\n", e.Index, e.PID, e.Admin,
			thousands(e.Conns), thousands(e.ClientSockets), thousands(e.BackendSockets), thousands(e.FDs),
			mib(e.RSSStartKB), mib(e.RSSConnectedKB), mib(e.RSSSettledKB), mib(e.RSSEchoedKB), per)
	}
	w("| **all** | | | **%s** | %s | %s | %s | %s | %s | **%s** | %s | **%.2f** |\n\n",
		thousands(t.EdgeConns), thousands(client), thousands(backend), thousands(fds),
		mib(t.EdgeRSSStartKB), mib(t.EdgeRSSConnKB), mib(t.EdgeRSSKB), mib(t.EdgeRSSEchoedKB), t.KiBPerConn)
	w("- RSS per connection after the hold: %.2f KiB (all edge RSS / connections); %.2f KiB above the %s MiB the %d edges took before connecting; %.2f KiB after one more echo on every connection.\n",
		t.KiBPerConn, t.KiBPerConnAdded, mib(t.EdgeRSSStartKB), len(r.Edges), t.KiBPerConnEchoed)
	w("- `SO_REUSEPORT` spread the connections from %s to %s per edge (mean %s).\n",
		thousands(t.MinConns), thousands(t.MaxConns), thousands(r.Plan.PerEdge))
	w("- Edge CPU while connecting: %.0f µs per connection (full TLS 1.3 handshake, backend dial, upgrade, one echo), over %d edges sharing %d cores with the generators and backends.\n\n",
		r.EdgeCPUPerConnUS, len(r.Edges), m.NProc)

	w("## For context: generators and backends\n\n")
	w("| process | connections | descriptors | RSS (MiB) |\n|---|---:|---:|---:|\n")
	for _, g := range r.Generators {
		w("| %s (`bench/loadgen -mode idle`) | %s | %s | %s |\n", g.Name, thousands(g.Conns), thousands(g.FDs), mib(g.RSSKB))
	}
	for _, be := range r.Backends {
		w("| %s (`edge-backend -listen %s`) | %s | %s | %s |\n", be.Name, be.Addr, thousands(be.Conns), thousands(be.FDs), mib(be.RSSKB))
	}
	w("\nGenerators: %s MiB in all (%.1f KiB per connection, Go `crypto/tls` and gorilla/websocket clients); backends: %s MiB in all (%.1f KiB per connection).\n\n",
		mib(t.GenRSSKB), t.GenKiBPerConn, mib(t.BackendRSSKB), t.BackendKiBPerConn)

	w("## Checks\n\n")
	for _, c := range r.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAILED"
		}
		w("- %s: %s (%s)\n", mark, c.Name, c.Detail)
	}
	w("\n## Setup\n\n")
	w("- %d edge processes, each `edge -config edge-N.yaml` with the benchmark's configuration (`bench/cmd/fleet/templates/edge.yaml.tmpl`, modelled on `bench/cmd/benchrun/templates/edge.yaml.tmpl`): the same public address for all, its own admin address (%s and up), least connections over every backend, tunnel timeouts of one hour, access logs off, GOGC unset (edge paces its collector itself)%s. They are started one after another, each once the previous one is ready, so every one binds the port while others hold it.\n",
		len(r.Edges), firstAdmin(r), gomaxprocsNote(r))
	w("- %d echo backends (`cmd/edge-backend`), one port each, about %s connections each. The edges dial them without binding, so the kernel picks one source address (127.0.0.1) for all and each backend address needs one ephemeral port per connection: %s ports are available per destination.\n",
		r.Plan.Backends, thousands(r.Plan.PerBackend), thousands(r.Limits.Ports))
	w("- %d `bench/loadgen -mode idle` generators, %s connections each, from source addresses 127.0.0.2 and up (`IP_BIND_ADDRESS_NO_PORT`), each connection with one 16-byte echo when it opens; the command `echo` sends one more on every held connection after the hold.\n",
		r.Plan.Gens, joinInts(r.Plan.PerGen))
	w("- Why several edges: at two descriptors per proxied connection (client and backend sockets), the per-process limit of %s descriptors holds fewer than %s connections per process. Nothing is pinned to a core; no sysctl or limit is changed.\n",
		thousands(r.Limits.FDs), thousands((r.Limits.FDs-fdReserve)/2))
	w("- Once every connection is up, the run holds them %s before the main reading.\n", time.Duration(r.SettleS*float64(time.Second)))
	w("- The run wrote every figure to `bench/out/fleet-%s.json`, and the configurations and logs to `bench/out/fleet-%s/` (`bench/out` is not committed).\n", r.Stamp, r.Stamp)
	return b.String()
}

func firstAdmin(r *Result) string {
	if len(r.Edges) == 0 {
		return "?"
	}
	return r.Edges[0].Admin
}

func gomaxprocsNote(r *Result) string {
	if r.EdgeGOMAXPROCS > 0 {
		return fmt.Sprintf(", GOMAXPROCS=%d (more edges than cores)", r.EdgeGOMAXPROCS)
	}
	return ""
}

func joinVersions(v map[string]string) string {
	var parts []string
	// Not the working tree's commit: bench/fleet.sh builds edge from a
	// snapshot, and the tree may have moved on by the time the run starts.
	for _, k := range []string{"edge", "go"} {
		if s, ok := v[k]; ok {
			// "edge -version" prints "edge VERSION".
			parts = append(parts, k+": "+strings.TrimPrefix(s, k+" "))
		}
	}
	return strings.Join(parts, "; ")
}

func joinInts(ns []int) string {
	seen := map[int]bool{}
	var parts []string
	for _, n := range ns {
		if !seen[n] {
			seen[n] = true
			parts = append(parts, thousands(n))
		}
	}
	return strings.Join(parts, " or ")
}

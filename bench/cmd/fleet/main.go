// Command fleet holds tens of thousands of wss connections with several edge
// processes sharing one port through SO_REUSEPORT, and measures the memory
// they take.
//
// One process cannot hold them: at two descriptors per proxied connection, a
// per-process limit of 20,000 descriptors stops an edge short of 10,000
// connections, so the fleet runs -edges edge processes on one public
// address, each with its own admin address, behind which echo backends
// (cmd/edge-backend) run. bench/loadgen generators open -conns connections
// (TLS 1.3, one 16-byte echo each) and hold them.
//
// The run checks, and fails unless:
//   - every edge holds its own listening socket on the shared port
//     (/proc/net/tcp and /proc/PID/fd);
//   - every generator reports all its connections up;
//   - the edges' connection gauges (edge_backend_active_connections on each
//     admin /metrics) sum to -conns, and so do the established sockets the
//     edges hold on the public port and towards the backends;
//   - after the -settle hold, one more echo on every connection comes back.
//
// It reads VmRSS of every edge before connecting, once all are connected,
// after the hold and after the last echo, and of the generators and
// backends for context, then writes bench/out/fleet-STAMP.json and, with
// -md, the markdown report (docs/FLEET.md). bench/fleet.sh builds the
// binaries and runs it.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/edgelb/edge/bench/internal/proc"
	"github.com/edgelb/edge/bench/internal/procfs"
	"github.com/edgelb/edge/bench/internal/tlscert"
	"github.com/edgelb/edge/bench/internal/wire"
)

//go:embed templates/edge.yaml.tmpl
var templates embed.FS

// options are the command-line settings of one run.
type options struct {
	conns      int
	edges      int
	gens       int
	backends   int
	settle     time.Duration
	timeout    time.Duration
	connectMax time.Duration
	gomaxprocs int
	dialConc   int
	srcCount   int

	ip          string
	port        int
	adminPort   int
	backendPort int
	listen      string // ip:port

	edgeBin    string
	backendBin string
	loadgenBin string
	outDir     string
	mdPath     string
	command    string
}

func main() {
	var o options
	flag.IntVar(&o.conns, "conns", 50000, "wss connections to hold")
	flag.IntVar(&o.edges, "edges", 7, "edge processes sharing the public port")
	flag.IntVar(&o.gens, "generators", 0, "load-generator processes (0: as the descriptor limit needs)")
	flag.IntVar(&o.backends, "backends", 0, "echo backend processes (0: as the descriptor limit and the ephemeral port range need, at least 3)")
	flag.DurationVar(&o.settle, "settle", 30*time.Second, "hold the connections this long before the memory reading")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "stop everything and fail after this long")
	flag.DurationVar(&o.connectMax, "connect-timeout", 10*time.Minute, "longest wait for every connection to be up")
	flag.IntVar(&o.gomaxprocs, "edge-gomaxprocs", 1, "GOMAXPROCS of each edge (0: the Go default); the edges outnumber the cores")
	flag.IntVar(&o.dialConc, "dial-concurrency", 64, "connections each generator establishes at once")
	flag.IntVar(&o.srcCount, "src-count", 200, "source addresses per generator, from 127.0.0.2 up")
	// A loopback address of its own keeps the fleet clear of bench/run.sh,
	// whose proxies and backends listen on 127.0.0.1 with the same ports.
	flag.StringVar(&o.ip, "ip", "127.0.100.1", "loopback address of every listener of the fleet (public, admin, backends)")
	flag.IntVar(&o.port, "port", 18443, "public port every edge listens on")
	flag.IntVar(&o.adminPort, "admin-port", 19901, "admin port of the first edge; edge i gets this plus i")
	flag.IntVar(&o.backendPort, "backend-port", 19001, "port of the first backend; backend i gets this plus i")
	flag.StringVar(&o.edgeBin, "edge-bin", "bench/out/bin/edge", "edge binary, run as EDGE_BIN -config FILE")
	flag.StringVar(&o.backendBin, "backend-bin", "bench/out/bin/edge-backend", "echo backend binary (-listen ADDR -id NAME)")
	flag.StringVar(&o.loadgenBin, "loadgen-bin", "bench/out/bin/loadgen", "load generator binary")
	flag.StringVar(&o.outDir, "out", "bench/out", "directory for the JSON result, configurations and logs")
	flag.StringVar(&o.mdPath, "md", "", "also write the markdown report here (e.g. docs/FLEET.md) if every check passed")
	flag.StringVar(&o.command, "command", "", "the command line to quote in the report (default: this one)")
	report := flag.String("report", "", "only render -md from this earlier JSON result")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if o.command == "" {
		o.command = strings.Join(os.Args, " ")
	}
	if *report != "" {
		if err := rerender(*report, o.mdPath); err != nil {
			log.Error("render report", "err", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("the run took longer than -timeout %v", o.timeout))
	defer cancel()

	stamp := time.Now().UTC().Format("20060102-150405")
	res := &Result{Started: time.Now().UTC(), Stamp: stamp, Command: o.command, Machine: machine(), Versions: versions(o),
		SettleS: o.settle.Seconds(), EdgeGOMAXPROCS: o.gomaxprocs}
	runErr := run(ctx, o, log, stamp, res)
	res.total()
	res.Finished = time.Now().UTC()
	res.DurationS = res.Finished.Sub(res.Started).Seconds()
	if runErr == nil {
		runErr = res.failed()
	}
	if runErr != nil {
		res.Error = runErr.Error()
	}
	outPath := filepath.Join(o.outDir, "fleet-"+stamp+".json")
	if err := writeJSON(outPath, res); err != nil {
		log.Error("write result", "err", err)
		os.Exit(1)
	}
	log.Info("result written", "file", outPath)
	if runErr != nil {
		log.Error("fleet failed", "err", runErr)
		os.Exit(1)
	}
	if o.mdPath != "" {
		if err := os.WriteFile(o.mdPath, []byte(renderMarkdown(res)), 0o644); err != nil {
			log.Error("write report", "err", err)
			os.Exit(1)
		}
		log.Info("report written", "file", o.mdPath)
	}
	fmt.Print(summary(res))
}

// rerender writes the markdown report of an earlier result, so a change of
// wording does not need another run.
func rerender(jsonPath, mdPath string) error {
	if mdPath == "" {
		return errors.New("-report needs -md")
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return fmt.Errorf("read result: %w", err)
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("decode result %s: %w", jsonPath, err)
	}
	if res.Error != "" {
		return fmt.Errorf("%s is a failed run: %s", jsonPath, res.Error)
	}
	if err := os.WriteFile(mdPath, []byte(renderMarkdown(&res)), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func writeJSON(path string, res *Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write result %s: %w", path, err)
	}
	return nil
}

type backendAddr struct{ ID, Addr string }

// fleet is what one run started. Unlike the benchmark's, its processes are
// not pinned to a core (proc.Pin): the edges outnumber the cores and share
// them all with the generators and backends.
type fleet struct {
	o        options
	dir      string
	ps       *proc.Group
	log      *slog.Logger
	backends []backendAddr
	peers    map[netip.AddrPort]bool
	public   netip.AddrPort
	bes      []*proc.Proc
	edges    []*proc.Proc
	admins   []string
	gens     proc.Gens
	// started is set once the generators were sent CmdStart: only then do
	// they read commands, so only then may stop send them CmdStop.
	started bool
}

func run(ctx context.Context, o options, log *slog.Logger, stamp string, res *Result) error {
	lim, err := readLimits()
	if err != nil {
		return err
	}
	res.Limits = lim
	p, err := makePlan(o.conns, o.edges, o.gens, o.backends, lim)
	res.Plan = p
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(o.ip)
	if err != nil || !ip.Is4() || !ip.IsLoopback() {
		return fmt.Errorf("-ip %q: want an IPv4 loopback address", o.ip)
	}
	// The generators' source addresses start at 127.0.0.2; the fleet's
	// listeners stay out of that range, so that in ss or /proc/net/tcp an
	// address tells the client side from the server side.
	if first, last := netip.MustParseAddr("127.0.0.2"), wire.SourceAddr(netip.MustParseAddr("127.0.0.2"), p.Gens*o.srcCount); ip.Compare(first) >= 0 && ip.Compare(last) <= 0 {
		return fmt.Errorf("-ip %s is among the generators' source addresses %s to %s", ip, first, last)
	}
	o.listen = netip.AddrPortFrom(ip, uint16(o.port)).String()
	res.Listen = o.listen
	var addrs []string
	addrs = append(addrs, o.listen)
	for i := range p.Edges {
		addrs = append(addrs, net.JoinHostPort(o.ip, strconv.Itoa(o.adminPort+i)))
	}
	for i := range p.Backends {
		addrs = append(addrs, net.JoinHostPort(o.ip, strconv.Itoa(o.backendPort+i)))
	}
	if err := checkFree(addrs); err != nil {
		return err
	}
	dir, err := filepath.Abs(filepath.Join(o.outDir, "fleet-"+stamp))
	if err != nil {
		return fmt.Errorf("resolve output dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create output dir %s: %w", dir, err)
	}
	res.Dir = dir
	if _, _, err := tlscert.Write(dir, ip); err != nil {
		return err
	}
	f := &fleet{o: o, dir: dir, ps: proc.NewGroup(), log: log, public: netip.MustParseAddrPort(o.listen), peers: map[netip.AddrPort]bool{}}
	defer f.stop()
	log.Info("plan", "conns", p.Conns, "edges", p.Edges, "generators", p.Gens, "backends", p.Backends,
		"fd_limit", lim.FDs, "ephemeral_ports", lim.Ports, "dir", dir)

	if err := f.startBackends(ctx, p.Backends); err != nil {
		return err
	}
	if err := f.startEdges(ctx, p.Edges); err != nil {
		return err
	}
	if err := f.checkShared(res); err != nil {
		return err
	}
	res.Edges = make([]EdgeRow, len(f.edges))
	for i, e := range f.edges {
		res.Edges[i] = EdgeRow{Index: i + 1, PID: e.PID(), Admin: f.admins[i], RSSStartKB: rss(e.PID())}
	}
	cpu0 := f.edgesCPU()

	// Open the connections.
	t0 := time.Now()
	if err := f.startGens(p); err != nil {
		return err
	}
	readyEvents, err := f.waitReady(ctx, t0)
	if err != nil {
		return err
	}
	res.ConnectS = time.Since(t0).Seconds()
	res.EdgeCPUPerConnUS = float64((f.edgesCPU() - cpu0).Microseconds()) / float64(p.Conns)
	established := 0
	for i, e := range readyEvents {
		established += e.Conns
		res.Generators = append(res.Generators, ProcRow{Name: f.gens[i].Proc.Name, PID: f.gens[i].Proc.PID(), Conns: e.Conns, Errors: e.Errors, ErrorSample: e.ErrorSample})
		if res.Cipher == "" {
			res.Cipher, res.Curve = e.Cipher, e.Curve
		}
	}
	res.check("every generator reports all its connections up", established == p.Conns,
		fmt.Sprintf("%s of %s established in %.1f s", thousands(established), thousands(p.Conns), res.ConnectS))
	log.Info("all generators ready", "established", established, "seconds", fmt.Sprintf("%.1f", res.ConnectS))
	// The hold is the generators' measured window; they answer "echo" in it
	// and end it cleanly on "stop".
	if err := f.gens.Send(wire.CmdStart); err != nil {
		return err
	}
	f.started = true

	if err := f.countEdges(res, "connected"); err != nil {
		return err
	}
	for i, e := range f.edges {
		res.Edges[i].RSSConnectedKB = rss(e.PID())
	}

	log.Info("holding", "settle", o.settle)
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(o.settle):
	}
	for i, e := range f.edges {
		res.Edges[i].RSSSettledKB = rss(e.PID())
		res.Edges[i].FDs, _ = procfs.CountFDs(e.PID())
	}
	for i := range res.Generators {
		res.Generators[i].RSSKB = rss(res.Generators[i].PID)
		res.Generators[i].FDs, _ = procfs.CountFDs(res.Generators[i].PID)
	}
	if err := f.countBackends(res); err != nil {
		return err
	}
	if err := f.countEdges(res, "after the hold"); err != nil {
		return err
	}

	// One more echo on every connection: each is still proxied end to end.
	log.Info("echo on every held connection")
	if err := f.gens.Send(wire.CmdEcho); err != nil {
		return err
	}
	ectx, cancel := context.WithTimeout(ctx, o.connectMax)
	defer cancel()
	echoed, err := f.gens.All(ectx, wire.EventEchoed)
	if err != nil {
		return fmt.Errorf("echo on the held connections: %w", err)
	}
	for _, e := range echoed {
		res.Echoed += int(e.Messages)
	}
	res.check("one more echo after the hold comes back on every connection", res.Echoed == p.Conns,
		fmt.Sprintf("%s of %s", thousands(res.Echoed), thousands(p.Conns)))
	for i, e := range f.edges {
		res.Edges[i].RSSEchoedKB = rss(e.PID())
	}
	res.total()
	log.Info("measured", "edge_rss_mib", fmt.Sprintf("%.1f", float64(res.Totals.EdgeRSSKB)/1024),
		"kib_per_conn", fmt.Sprintf("%.2f", res.Totals.KiBPerConn))
	return nil
}

func (f *fleet) startBackends(ctx context.Context, n int) error {
	for i := range n {
		b := backendAddr{ID: fmt.Sprintf("b%d", i+1), Addr: net.JoinHostPort(f.o.ip, strconv.Itoa(f.o.backendPort+i))}
		f.backends = append(f.backends, b)
		f.peers[netip.MustParseAddrPort(b.Addr)] = true
		p, err := f.ps.Start("backend-"+b.ID, nil, filepath.Join(f.dir, "backend-"+b.ID+".log"), nil, nil,
			f.o.backendBin, "-listen", b.Addr, "-id", b.ID)
		if err != nil {
			return err
		}
		f.bes = append(f.bes, p)
	}
	for i, b := range f.backends {
		if err := proc.WaitListening(ctx, f.bes[i], b.Addr, 15*time.Second); err != nil {
			return err
		}
	}
	// Answering on the address is not enough: it must be our process.
	table, err := readProcNetTCP()
	if err != nil {
		return err
	}
	for i, b := range f.backends {
		s, err := countSockets(table, f.bes[i].PID(), netip.MustParseAddrPort(b.Addr), nil)
		if err != nil {
			return fmt.Errorf("%s: %w (see its log)", f.bes[i].Name, err)
		}
		if len(s.Listening) != 1 {
			return fmt.Errorf("%s (pid %d) does not hold the listening socket of %s", f.bes[i].Name, f.bes[i].PID(), b.Addr)
		}
	}
	return nil
}

// checkFree makes sure nothing listens on the fleet's addresses yet: a
// foreign backend would take the fleet's traffic, and a foreign listener
// with SO_REUSEPORT would share the public port with the edges.
func checkFree(addrs []string) error {
	for _, a := range addrs {
		ln, err := net.Listen("tcp4", a)
		if err != nil {
			return fmt.Errorf("address %s is taken by another process (see ss -ltnp); choose other -ip or ports: %w", a, err)
		}
		_ = ln.Close()
	}
	return nil
}

// edgeConfig feeds templates/edge.yaml.tmpl.
type edgeConfig struct {
	Dir, Listen, Admin string
	Backends           []backendAddr
}

// startEdges starts the edges one after another, each once the previous one
// is ready, so that every one binds the public port while others already
// hold it: without SO_REUSEPORT the second would fail with EADDRINUSE.
func (f *fleet) startEdges(ctx context.Context, n int) error {
	t, err := template.ParseFS(templates, "templates/edge.yaml.tmpl")
	if err != nil {
		return fmt.Errorf("parse edge template: %w", err)
	}
	var env []string
	if f.o.gomaxprocs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(f.o.gomaxprocs))
	}
	for i := range n {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		name := fmt.Sprintf("edge-%d", i+1)
		admin := net.JoinHostPort(f.o.ip, strconv.Itoa(f.o.adminPort+i))
		cfg := filepath.Join(f.dir, name+".yaml")
		var b strings.Builder
		if err := t.Execute(&b, edgeConfig{Dir: f.dir, Listen: f.o.listen, Admin: admin, Backends: f.backends}); err != nil {
			return fmt.Errorf("render %s: %w", cfg, err)
		}
		if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", cfg, err)
		}
		p, err := f.ps.Start(name, env, filepath.Join(f.dir, name+".log"), nil, nil, f.o.edgeBin, "-config", cfg)
		if err != nil {
			return err
		}
		f.edges = append(f.edges, p)
		f.admins = append(f.admins, admin)
		if err := ready(p, admin, 20*time.Second); err != nil {
			return fmt.Errorf("%w; log: %s", err, filepath.Join(f.dir, name+".log"))
		}
	}
	f.log.Info("edges ready", "edges", n, "listen", f.o.listen)
	return nil
}

// checkShared verifies that every edge holds a listening socket of its own
// on the public port, and that nothing else listens there.
func (f *fleet) checkShared(res *Result) error {
	table, err := readProcNetTCP()
	if err != nil {
		return err
	}
	seen := map[uint64]bool{}
	var problems []string
	for i, e := range f.edges {
		s, err := countSockets(table, e.PID(), f.public, nil)
		if err != nil {
			return err
		}
		if len(s.Listening) != 1 {
			problems = append(problems, fmt.Sprintf("edge %d (pid %d) holds %d listening sockets on %s", i+1, e.PID(), len(s.Listening), f.public))
		}
		for _, n := range s.Listening {
			seen[n] = true
		}
	}
	all := 0
	for _, s := range table {
		if s.state == tcpListen && s.local == f.public {
			all++
		}
	}
	res.ListenSockets = all
	res.check("every edge has its own listening socket on the shared port (SO_REUSEPORT)",
		len(problems) == 0 && len(seen) == len(f.edges) && all == len(f.edges),
		fmt.Sprintf("%d edges, %d distinct listening sockets of theirs, %d listening sockets on %s in all%s",
			len(f.edges), len(seen), all, f.public, joinProblems(problems)))
	if !res.Checks[len(res.Checks)-1].OK {
		return errors.New("the public port is not shared as expected: " + res.Checks[len(res.Checks)-1].Detail)
	}
	return nil
}

func joinProblems(p []string) string {
	if len(p) == 0 {
		return ""
	}
	return "; " + strings.Join(p, "; ")
}

func (f *fleet) startGens(p plan) error {
	off := 0
	maxLife := f.o.timeout + time.Minute
	for i, n := range p.PerGen {
		name := fmt.Sprintf("gen-%d", i+1)
		g, err := f.ps.StartGen(name, filepath.Join(f.dir, name+".log"),
			f.o.loadgenBin, "-mode", "idle", "-conns", strconv.Itoa(n), "-target", f.o.listen,
			"-src-base", "127.0.0.2", "-src-offset", strconv.Itoa(off), "-src-count", strconv.Itoa(f.o.srcCount),
			"-dial-concurrency", strconv.Itoa(f.o.dialConc), "-timeout", "30s", "-max-life", maxLife.String())
		if err != nil {
			return err
		}
		f.gens = append(f.gens, g)
		off += f.o.srcCount
	}
	return nil
}

// waitReady waits for every generator's ready event, logging the edges'
// connection count meanwhile.
func (f *fleet) waitReady(ctx context.Context, t0 time.Time) ([]wire.Event, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, f.o.connectMax, fmt.Errorf("not every connection was up after -connect-timeout %v", f.o.connectMax))
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sum := 0
				for _, a := range f.admins {
					n, _ := activeConns(a)
					sum += n
				}
				f.log.Info("connecting", "proxied", sum, "seconds", int(time.Since(t0).Seconds()))
			}
		}
	}()
	ev, err := f.gens.All(ctx, wire.EventReady)
	if err != nil {
		return nil, fmt.Errorf("open the connections: %w", err)
	}
	return ev, nil
}

// countEdges reads every edge's connection gauge and its established sockets
// and checks both against the connections the generators hold.
func (f *fleet) countEdges(res *Result, when string) error {
	table, err := readProcNetTCP()
	if err != nil {
		return err
	}
	var metric, client, backend int
	for i, e := range f.edges {
		n, err := activeConns(f.admins[i])
		if err != nil {
			return err
		}
		s, err := countSockets(table, e.PID(), f.public, f.peers)
		if err != nil {
			return err
		}
		row := &res.Edges[i]
		row.Conns, row.ClientSockets, row.BackendSockets = n, s.Local, s.Remote
		metric += n
		client += s.Local
		backend += s.Remote
	}
	want := res.Plan.Conns
	res.check(fmt.Sprintf("edges' connection gauges and sockets sum to %s, %s", thousands(want), when),
		metric == want && client == want && backend == want,
		fmt.Sprintf("%s %s, established client sockets %s, established backend sockets %s",
			activeMetric, thousands(metric), thousands(client), thousands(backend)))
	for i, r := range res.Edges {
		if r.Conns == 0 {
			res.check(fmt.Sprintf("edge %d receives connections", i+1), false, "its gauge is 0")
		}
	}
	f.log.Info("counted", "when", when, "gauge", metric, "client_sockets", client, "backend_sockets", backend)
	return nil
}

func (f *fleet) countBackends(res *Result) error {
	table, err := readProcNetTCP()
	if err != nil {
		return err
	}
	res.Backends = res.Backends[:0]
	for i, p := range f.bes {
		s, err := countSockets(table, p.PID(), netip.MustParseAddrPort(f.backends[i].Addr), nil)
		if err != nil {
			return err
		}
		fds, _ := procfs.CountFDs(p.PID())
		res.Backends = append(res.Backends, ProcRow{Name: p.Name, PID: p.PID(), Addr: f.backends[i].Addr,
			Conns: s.Local, RSSKB: rss(p.PID()), FDs: fds})
	}
	return nil
}

func (f *fleet) edgesCPU() time.Duration {
	var d time.Duration
	for _, e := range f.edges {
		if s, err := procfs.ReadProcStat(e.PID()); err == nil {
			d += s.CPU()
		}
	}
	return d
}

// stop closes the generators' connections first (so the edges have nothing
// left to drain), then stops the edges and backends.
func (f *fleet) stop() {
	if f.started {
		_ = f.gens.Send(wire.CmdStop)
	}
	f.gens.Finish(60 * time.Second)
	f.ps.StopAll(10 * time.Second)
}

func rss(pid int) int64 {
	kb, err := procfs.ReadRSS(pid)
	if err != nil {
		return 0
	}
	return kb
}

// machine describes where the run happened.
func machine() Machine {
	m := Machine{Machine: procfs.ReadMachine()}
	if lo, hi, err := portRange(); err == nil {
		m.PortRange = fmt.Sprintf("%d-%d", lo, hi)
	}
	if b, err := os.ReadFile("/proc/sys/net/core/somaxconn"); err == nil {
		m.Somaxconn = strings.TrimSpace(string(b))
	}
	return m
}

func versions(o options) map[string]string {
	v := map[string]string{"go": runtime.Version()}
	if out, err := exec.Command(o.edgeBin, "-version").Output(); err == nil {
		v["edge"] = strings.TrimSpace(string(out))
	}
	return v
}

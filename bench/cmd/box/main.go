// Command box runs a full box: -conns idle wss connections (TLS 1.3) held
// over as many proxy processes as the descriptor limit needs, all on one
// port with SO_REUSEPORT, with a share of them (-active) echoing one
// message a second, for edge (frame-aware: pings every -ping, ping
// timeout -ping-timeout, admission at its defaults) and for HAProxy with
// the same number of processes (nbthread 1 each), one after the other in
// the same run.
//
// For each proxy it measures: the time until every connection is up;
// RSS of the proxies per connection once all are up and after -settle;
// the kernel's memory per connection (/proc/net/sockstat TCP pages and
// /proc/meminfo Slab, both over the whole loopback test, that is the
// client, proxy and backend sockets of each connection); the proxies' CPU
// per second of holding them (user and system) and the p50/p99 of the
// active echoes over the -hold window; then, with -storm, the time until
// every client is back after every proxy process was killed with SIGKILL
// and started again (clients reconnect after a random delay up to
// -reconnect-jitter); and for edge with -upgrade, the time to run
// `edge -upgrade` on every process one after another with the
// connections live, and the p99 of the active echoes meanwhile.
//
// Everything listens on -ip (loopback), the clients bind 127.0.0.2 and
// up; the run stops itself after -timeout and stops every process it
// started. It changes no sysctl and raises no limit.
package main

import (
	"bufio"
	"context"
	"embed"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/edgelb/edge/bench/internal/proc"
	"github.com/edgelb/edge/bench/internal/procfs"
	"github.com/edgelb/edge/bench/internal/stats"
	"github.com/edgelb/edge/bench/internal/tlscert"
	"github.com/edgelb/edge/bench/internal/wire"
)

//go:embed templates/edge.yaml.tmpl templates/haproxy.cfg.tmpl
var templates embed.FS

type options struct {
	conns, procs, gens, backends int
	perProc                      int
	active                       float64
	proxies                      []string
	settle, hold                 time.Duration
	connectMax                   time.Duration
	jitter                       time.Duration
	ping, pingTimeout            time.Duration
	storm, upgrade               bool
	timeout                      time.Duration
	dialConc, srcCount           int
	ip                           string
	port, adminPort, backendPort int
	edgeBin, backendBin          string
	loadgenBin, haproxyBin       string
	outDir, client               string
}

func main() {
	var o options
	var proxies string
	flag.IntVar(&o.conns, "conns", 100000, "wss connections to hold")
	flag.IntVar(&o.perProc, "per-proc", 9000, "connections planned per proxy process (two descriptors each, under the 20,000 limit with room for the storm's imbalance)")
	flag.IntVar(&o.procs, "procs", 0, "proxy processes (0: conns / -per-proc, rounded up)")
	flag.IntVar(&o.gens, "generators", 0, "generator processes (0: one per 16,000 connections)")
	flag.IntVar(&o.backends, "backends", 0, "echo backends (0: one per 16,000 connections, at least 3)")
	flag.Float64Var(&o.active, "active", 0.01, "share of the connections that echo 100 bytes once a second")
	flag.StringVar(&proxies, "proxies", "edge,haproxy", "proxies to run, one after the other")
	flag.DurationVar(&o.settle, "settle", 20*time.Second, "wait after the last connection is up before the settled memory reading")
	flag.DurationVar(&o.hold, "hold", 30*time.Second, "window of the CPU and latency figures while holding")
	flag.DurationVar(&o.connectMax, "connect-timeout", 8*time.Minute, "longest wait for every connection to be up (also after a storm)")
	flag.DurationVar(&o.jitter, "reconnect-jitter", 10*time.Second, "a client whose connection ended reconnects after a random delay up to this")
	flag.DurationVar(&o.ping, "ping", 30*time.Second, "edge's ping interval")
	flag.DurationVar(&o.pingTimeout, "ping-timeout", 90*time.Second, "edge's ping timeout")
	flag.BoolVar(&o.storm, "storm", true, "kill every proxy process with SIGKILL, start them again, and time the clients' return")
	flag.BoolVar(&o.upgrade, "upgrade", true, "edge: run edge -upgrade on every process, one after another, with the connections live")
	flag.DurationVar(&o.timeout, "timeout", 40*time.Minute, "stop everything and fail after this long")
	flag.IntVar(&o.dialConc, "dial-concurrency", 32, "connections each generator establishes at once")
	flag.IntVar(&o.srcCount, "src-count", 200, "source addresses per generator, from 127.0.0.2 up")
	flag.StringVar(&o.ip, "ip", "127.0.101.1", "loopback address of every listener (public, admin, backends)")
	flag.IntVar(&o.port, "port", 18443, "public port every proxy process listens on")
	flag.IntVar(&o.adminPort, "admin-port", 19901, "admin port of the first edge; edge i gets this plus i")
	flag.IntVar(&o.backendPort, "backend-port", 19001, "port of the first backend")
	flag.StringVar(&o.edgeBin, "edge-bin", "bench/out/bin/edge", "edge binary")
	flag.StringVar(&o.backendBin, "backend-bin", "bench/out/bin/edge-backend", "echo backend binary")
	flag.StringVar(&o.loadgenBin, "loadgen-bin", "bench/out/bin/loadgen", "load generator binary")
	flag.StringVar(&o.haproxyBin, "haproxy-bin", "haproxy", "HAProxy binary")
	flag.StringVar(&o.client, "client", "gobwas", "generator client: gorilla or gobwas")
	flag.StringVar(&o.outDir, "out", "bench/out", "directory for the JSON result, configurations and logs")
	flag.Parse()
	o.proxies = strings.Split(proxies, ",")
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := plan(&o); err != nil {
		log.Error("plan", "err", err)
		os.Exit(2)
	}
	// The new process of an edge -upgrade is the old one's child, orphaned
	// when it exits: as a subreaper this process reaps it.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, 36 /* PR_SET_CHILD_SUBREAPER */, 1, 0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("the run took longer than -timeout %v", o.timeout))
	defer cancel()

	stamp := time.Now().UTC().Format("20060102-150405")
	res := &Result{Stamp: stamp, Command: strings.Join(os.Args, " "), Machine: procfs.ReadMachine(), Conns: o.conns,
		Procs: o.procs, Gens: o.gens, Backends: o.backends, Active: int(math.Round(o.active * float64(o.conns))),
		PingS: o.ping.Seconds(), PingTimeoutS: o.pingTimeout.Seconds(), JitterS: o.jitter.Seconds(), Client: o.client}
	var runErr error
	for _, p := range o.proxies {
		r, err := runProxy(ctx, o, log, stamp, p)
		res.Runs = append(res.Runs, r)
		if err != nil {
			runErr = fmt.Errorf("%s: %w", p, err)
			break
		}
	}
	if runErr != nil {
		res.Error = runErr.Error()
	}
	out := filepath.Join(o.outDir, "box-"+stamp+".json")
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		log.Error("write result", "err", err)
	}
	fmt.Print(render(res))
	log.Info("result written", "file", out)
	if runErr != nil {
		log.Error("box failed", "err", runErr)
		os.Exit(1)
	}
}

func plan(o *options) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if o.procs == 0 {
		o.procs = ceilDiv(o.conns, o.perProc)
	}
	if o.gens == 0 {
		o.gens = ceilDiv(o.conns, 16000)
	}
	if o.backends == 0 {
		o.backends = max(3, ceilDiv(o.conns, 16000))
	}
	lim := int(rl.Cur) - 500
	switch {
	case 2*ceilDiv(o.conns, o.procs) > lim:
		return fmt.Errorf("%d connections over %d proxy processes exceed the descriptor limit %d: raise -procs", o.conns, o.procs, rl.Cur)
	case ceilDiv(o.conns, o.gens) > lim || ceilDiv(o.conns, o.backends) > lim:
		return fmt.Errorf("generators or backends over the descriptor limit %d: raise -generators or -backends", rl.Cur)
	}
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Result is the JSON of one run.
type Result struct {
	Stamp, Command, Client, Error string
	Machine                       procfs.Machine
	Conns, Procs, Gens, Backends  int
	Active                        int
	PingS, PingTimeoutS, JitterS  float64
	Runs                          []Run
}

// Run holds one proxy's figures.
type Run struct {
	Proxy            string
	Dir              string
	ConnectS         float64 // start of the generators to every connection up
	ProxyCPUConnectS float64 // proxies' CPU (user+system) over the connect
	RSSBeforeKB      int64   // proxies, before any connection
	RSSAtOnceKB      int64   // right after the last connection was up
	RSSSettledKB     int64   // after -settle
	KiBAtOnce        float64 // per connection
	KiBSettled       float64
	// The same from the processes' own memory (RssAnon) and from their
	// proportional set size (Pss): VmRSS counts the executable's pages,
	// shared by every process, once per process (procfs.Mem).
	MemBefore, MemAtOnce, MemSettled procfs.Mem
	AnonKiBAtOnce, AnonKiBSettled    float64
	PssKiBAtOnce, PssKiBSettled      float64
	SockMemKiB                       float64 // /proc/net/sockstat TCP mem, per connection, all sockets of the test
	SlabKiB                          float64 // /proc/meminfo Slab, per connection, all sockets of the test
	HoldS                            float64
	HoldUserPct                      float64 // proxies' user CPU over the hold, percent of one core
	HoldSysPct                       float64
	ActiveP50Ms                      float64
	ActiveP99Ms                      float64
	ActiveMessages                   uint64
	UpAfterHold                      int
	EndedDuringHold                  uint64
	StormS                           float64 // SIGKILL of every proxy to every connection back
	StormProxyCPUS                   float64
	StormUserS                       float64
	StormSysS                        float64
	StormReconnects                  uint64
	StormDown                        int     // fewest connections up during the storm
	UpgradeS                         float64 // first edge -upgrade to the last old process's exit
	UpgradeP50Ms                     float64
	UpgradeP99Ms                     float64
	UpgradeExtraP99Ms                float64 // over the hold's p99
	UpgradeEnded                     uint64  // connections that ended during the upgrades (must be 0)
	UpgradeMessages                  uint64
	UpAfterUpgrade                   int
	UpgradePerProcS                  []float64
	Procs                            int
	ConnsPerProc                     []int
	HostOtherPctConnect              float64
	// HoldHostPct is every core's busy time over the hold, proxies,
	// generators, backends and what no process is charged for (timers'
	// softirqs: TCP keep-alive probes, say), in percent of one core.
	HoldHostPct float64
}

type backendAddr struct{ ID, Addr string }

type tmplData struct {
	Dir, Listen, Admin        string
	StateDir                  string // edge's own: the admin token edge -upgrade reads
	Backends                  []backendAddr
	PingInterval, PingTimeout string
	MaxConn                   int
}

// box is what one proxy's run started.
type box struct {
	o        options
	log      *slog.Logger
	dir      string
	ps       *proc.Group
	kind     string
	cfgs     []string
	admins   []string
	pids     []int // the proxy processes now (after an upgrade: the new ones)
	procs    []*proc.Proc
	gens     proc.Gens
	backends []backendAddr
	listen   string
}

func runProxy(ctx context.Context, o options, log *slog.Logger, stamp, kind string) (Run, error) {
	r := Run{Proxy: kind, Procs: o.procs}
	dir, err := runDir(o, stamp, kind)
	if err != nil {
		return r, err
	}
	r.Dir = dir
	b := &box{o: o, log: log.With("proxy", kind), dir: dir, ps: proc.NewGroup(), kind: kind,
		listen: net.JoinHostPort(o.ip, strconv.Itoa(o.port))}
	defer b.stop()
	if err := b.startBackends(ctx); err != nil {
		return r, err
	}
	if err := b.startProxies(ctx); err != nil {
		return r, err
	}
	time.Sleep(2 * time.Second)
	if err := b.connect(ctx, &r); err != nil {
		return r, err
	}
	st1, err := b.settleAndHold(ctx, &r)
	if err != nil {
		return r, err
	}
	if kind == "edge" && o.upgrade {
		if err := b.upgradeAll(ctx, &r, st1); err != nil {
			return r, err
		}
	}
	if o.storm {
		if err := b.stormOnce(ctx, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// runDir makes the directory of one proxy's run, with the listeners'
// certificate and key in it.
func runDir(o options, stamp, kind string) (string, error) {
	dir, err := filepath.Abs(filepath.Join(o.outDir, "box-"+stamp, kind))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	ip, err := netip.ParseAddr(o.ip)
	if err != nil || !ip.Is4() || !ip.IsLoopback() {
		return "", fmt.Errorf("-ip %q: want an IPv4 loopback address", o.ip)
	}
	certPEM, keyPEM, err := tlscert.Write(dir, ip)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert-and-key.pem"), append(certPEM, keyPEM...), 0o600); err != nil {
		return "", fmt.Errorf("write cert-and-key.pem: %w", err)
	}
	return dir, nil
}

// connect starts the generators and waits for every connection: the
// time, the proxies' CPU and memory before and once all are up.
func (b *box) connect(ctx context.Context, r *Run) error {
	o := b.o
	r.MemBefore = b.mem()
	r.RSSBeforeKB = r.MemBefore.RSS
	sock0, slab0 := kernelMem()
	cpu0 := b.cpu()
	host0 := hostBusy()
	t0 := time.Now()
	if err := b.startGens(); err != nil {
		return err
	}
	if _, err := b.waitUp(ctx, t0, o.conns, nil); err != nil {
		return err
	}
	r.ConnectS = time.Since(t0).Seconds()
	u, s := b.cpu().sub(cpu0)
	r.ProxyCPUConnectS = (u + s).Seconds()
	r.HostOtherPctConnect = 100 * (hostBusy() - host0 - u - s).Seconds() / time.Since(t0).Seconds()
	r.MemAtOnce = b.mem()
	r.RSSAtOnceKB = r.MemAtOnce.RSS
	sock1, slab1 := kernelMem()
	r.KiBAtOnce = float64(r.RSSAtOnceKB-r.RSSBeforeKB) / float64(o.conns)
	r.AnonKiBAtOnce = float64(r.MemAtOnce.Anon-r.MemBefore.Anon) / float64(o.conns)
	r.PssKiBAtOnce = float64(r.MemAtOnce.Pss-r.MemBefore.Pss) / float64(o.conns)
	r.SockMemKiB = float64(sock1-sock0) / float64(o.conns)
	r.SlabKiB = float64(slab1-slab0) / float64(o.conns)
	b.log.Info("all up", "seconds", fmt.Sprintf("%.1f", r.ConnectS), "kib_per_conn", fmt.Sprintf("%.2f", r.KiBAtOnce))
	r.ConnsPerProc = b.connsPerProc()
	return nil
}

// settleAndHold waits -settle, reads the settled memory, then holds the
// connections for -hold: the proxies' and the host's CPU and the active
// echoes' latency over it. It returns the generators' stats at its end.
func (b *box) settleAndHold(ctx context.Context, r *Run) (genStats, error) {
	o := b.o
	if !sleepCtx(ctx, o.settle) {
		return genStats{}, context.Cause(ctx)
	}
	r.MemSettled = b.mem()
	r.RSSSettledKB = r.MemSettled.RSS
	r.KiBSettled = float64(r.RSSSettledKB-r.RSSBeforeKB) / float64(o.conns)
	r.AnonKiBSettled = float64(r.MemSettled.Anon-r.MemBefore.Anon) / float64(o.conns)
	r.PssKiBSettled = float64(r.MemSettled.Pss-r.MemBefore.Pss) / float64(o.conns)
	st0, err := b.stats(ctx) // resets the latency histograms
	if err != nil {
		return genStats{}, err
	}
	cpu0 := b.cpu()
	hostHold0 := hostBusy()
	h0 := time.Now()
	if !sleepCtx(ctx, o.hold) {
		return genStats{}, context.Cause(ctx)
	}
	st1, err := b.stats(ctx)
	if err != nil {
		return genStats{}, err
	}
	u, s := b.cpu().sub(cpu0)
	r.HoldS = time.Since(h0).Seconds()
	r.HoldUserPct, r.HoldSysPct = 100*u.Seconds()/r.HoldS, 100*s.Seconds()/r.HoldS
	r.HoldHostPct = 100 * (hostBusy() - hostHold0).Seconds() / r.HoldS
	r.ActiveP50Ms, r.ActiveP99Ms = ms(st1.hist.Quantile(0.50)), ms(st1.hist.Quantile(0.99))
	r.ActiveMessages = st1.messages - st0.messages
	r.UpAfterHold = st1.up
	r.EndedDuringHold = st1.ended - st0.ended
	b.log.Info("held", "cpu_pct", fmt.Sprintf("%.2f+%.2f", r.HoldUserPct, r.HoldSysPct), "p99_ms", r.ActiveP99Ms, "up", st1.up)
	return st1, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (b *box) startBackends(ctx context.Context) error {
	var ps []*proc.Proc
	for i := range b.o.backends {
		a := backendAddr{ID: fmt.Sprintf("b%d", i+1), Addr: net.JoinHostPort(b.o.ip, strconv.Itoa(b.o.backendPort+i))}
		b.backends = append(b.backends, a)
		p, err := b.ps.Start("backend-"+a.ID, nil, filepath.Join(b.dir, "backend-"+a.ID+".log"), nil, nil,
			b.o.backendBin, "-listen", a.Addr, "-id", a.ID)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	for i, a := range b.backends {
		if err := proc.WaitListening(ctx, ps[i], a.Addr, 15*time.Second); err != nil {
			return err
		}
	}
	return nil
}

func (b *box) render(name string, d tmplData) (string, error) {
	t, err := template.ParseFS(templates, "templates/"+name+".tmpl")
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", name, err)
	}
	var sb strings.Builder
	if err := t.Execute(&sb, d); err != nil {
		return "", fmt.Errorf("render %s: %w", name, err)
	}
	return sb.String(), nil
}

func (b *box) startProxies(ctx context.Context) error {
	for i := range b.o.procs {
		name := fmt.Sprintf("%s-%d", b.kind, i+1)
		d := tmplData{Dir: b.dir, Listen: b.listen, Backends: b.backends, PingInterval: b.o.ping.String(),
			PingTimeout: b.o.pingTimeout.String(), MaxConn: 9900,
			Admin: net.JoinHostPort(b.o.ip, strconv.Itoa(b.o.adminPort+i))}
		var cfg string
		if b.kind == "edge" {
			cfg = filepath.Join(b.dir, name+".yaml")
			d.StateDir = filepath.Join(b.dir, name+".state")
			if err := os.MkdirAll(d.StateDir, 0o700); err != nil {
				return fmt.Errorf("state dir: %w", err)
			}
			b.admins = append(b.admins, d.Admin)
		} else {
			cfg = filepath.Join(b.dir, name+".cfg")
		}
		text, err := b.render(map[bool]string{true: "edge.yaml", false: "haproxy.cfg"}[b.kind == "edge"], d)
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", cfg, err)
		}
		b.cfgs = append(b.cfgs, cfg)
	}
	return b.startAll(ctx, true)
}

// startAll starts every proxy process; wait: one after another, each once
// ready (the first start), or all at once (the storm's restart).
func (b *box) startAll(ctx context.Context, wait bool) error {
	b.procs, b.pids = b.procs[:0], b.pids[:0]
	for i, cfg := range b.cfgs {
		name := fmt.Sprintf("%s-%d", b.kind, i+1)
		var argv []string
		var env []string
		if b.kind == "edge" {
			argv = []string{b.o.edgeBin, "-config", cfg}
			env = []string{"GOMAXPROCS=1"}
		} else {
			argv = []string{b.o.haproxyBin, "-db", "-f", cfg}
		}
		p, err := b.ps.Start(name, env, filepath.Join(b.dir, name+".log"), nil, nil, argv...)
		if err != nil {
			return err
		}
		b.procs = append(b.procs, p)
		b.pids = append(b.pids, p.PID())
		if wait {
			if err := b.waitReady(ctx, i, p); err != nil {
				return err
			}
		}
	}
	return nil
}

var adminClient = &http.Client{Timeout: 5 * time.Second}

func (b *box) waitReady(ctx context.Context, i int, p *proc.Proc) error {
	if b.kind != "edge" {
		return proc.WaitListening(ctx, p, b.listen, 20*time.Second)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := adminClient.Get("http://" + b.admins[i] + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("%s not ready (see %s)", p.Name, b.dir)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return context.Cause(ctx)
		}
	}
}

func (b *box) startGens() error {
	per := stats.Split(b.o.conns, b.o.gens)
	active := stats.Split(int(math.Round(b.o.active*float64(b.o.conns))), b.o.gens)
	maxLife := b.o.timeout + time.Minute
	for i, n := range per {
		name := fmt.Sprintf("gen-%d", i+1)
		g, err := b.ps.StartGen(name, filepath.Join(b.dir, name+".log"), b.o.loadgenBin, "-mode", "hold",
			"-client", b.o.client, "-conns", strconv.Itoa(n), "-active", strconv.Itoa(active[i]), "-rate", "1", "-size", "100",
			"-target", b.listen, "-src-base", "127.0.0.2", "-src-offset", strconv.Itoa(i*b.o.srcCount),
			"-src-count", strconv.Itoa(b.o.srcCount), "-dial-concurrency", strconv.Itoa(b.o.dialConc),
			"-reconnect-jitter", b.o.jitter.String(), "-timeout", "30s", "-max-life", maxLife.String())
		if err != nil {
			return err
		}
		b.gens = append(b.gens, g)
	}
	return nil
}

type genStats struct {
	up       int
	ops      uint64
	ended    uint64
	messages uint64
	hist     *stats.Histogram
}

// stats asks every generator for its counts and merges them; the
// latency histograms restart.
func (b *box) stats(ctx context.Context) (genStats, error) {
	if err := b.gens.Send(wire.CmdStats); err != nil {
		return genStats{}, err
	}
	// A generator dialing thousands of connections on a crowded host can
	// take long to answer.
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	evs, err := b.gens.All(sctx, wire.EventStats)
	if err != nil {
		return genStats{}, err
	}
	s := genStats{hist: &stats.Histogram{}}
	for _, e := range evs {
		s.up += e.Conns
		s.ops += e.Ops
		s.ended += e.Ended
		s.messages += e.Messages
		if e.Latency != nil {
			s.hist.Merge(e.Latency)
		}
	}
	return s, nil
}

// waitUp polls the generators until want connections are up; low, if not
// nil, gets the fewest seen.
func (b *box) waitUp(ctx context.Context, t0 time.Time, want int, low *int) (genStats, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, b.o.connectMax, fmt.Errorf("not every connection was up after -connect-timeout %v", b.o.connectMax))
	defer cancel()
	last := time.Now()
	for {
		s, err := b.stats(ctx)
		if err != nil {
			return s, err
		}
		if low != nil && s.up < *low {
			*low = s.up
		}
		if s.up >= want && (low == nil || *low < want) {
			return s, nil
		}
		if time.Since(last) > 10*time.Second {
			b.log.Info("connecting", "up", s.up, "seconds", int(time.Since(t0).Seconds()))
			last = time.Now()
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return s, context.Cause(ctx)
		}
	}
}

// stormOnce kills every proxy process with SIGKILL, starts them all again
// at once, and waits until every client is back.
func (b *box) stormOnce(ctx context.Context, r *Run) error {
	st0, err := b.stats(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for _, pid := range b.pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, p := range b.procs {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
		}
	}
	b.waitGone(b.pids, 10*time.Second)
	// A killed process holding thousands of sockets takes a while to let go
	// of its admin port; the restarted edge must be able to bind it.
	b.waitFree(b.admins, 20*time.Second)
	cpu0 := cpuTimes{}
	if err := b.startAll(ctx, false); err != nil {
		return err
	}
	low := b.o.conns
	st1, err := b.waitUp(ctx, t0, b.o.conns, &low)
	if err != nil {
		return err
	}
	r.StormS = time.Since(t0).Seconds()
	u, s := b.cpu().sub(cpu0) // the new processes started from zero
	r.StormUserS, r.StormSysS = u.Seconds(), s.Seconds()
	r.StormProxyCPUS = (u + s).Seconds()
	r.StormReconnects = st1.ops - st0.ops
	r.StormDown = low
	b.log.Info("storm over", "seconds", fmt.Sprintf("%.1f", r.StormS), "reconnects", r.StormReconnects, "lowest_up", low)
	return nil
}

var upgradedRe = regexp.MustCompile(`pid (\d+) now serves`)

// upgradeAll runs edge -upgrade on every edge, one after another, each
// once the previous old process has exited.
func (b *box) upgradeAll(ctx context.Context, r *Run, before genStats) error {
	if _, err := b.stats(ctx); err != nil { // restart the histograms
		return err
	}
	t0 := time.Now()
	for i, cfg := range b.cfgs {
		ti := time.Now()
		out, err := exec.CommandContext(ctx, b.o.edgeBin, "-upgrade", "-config", cfg).CombinedOutput()
		if err != nil {
			return fmt.Errorf("edge -upgrade -config %s: %w: %s", cfg, err, out)
		}
		m := upgradedRe.FindStringSubmatch(string(out))
		if m == nil {
			return fmt.Errorf("edge -upgrade -config %s printed no new pid: %s", cfg, out)
		}
		newPID, _ := strconv.Atoi(m[1])
		old := b.pids[i]
		if !b.waitGone([]int{old}, 70*time.Second) {
			return fmt.Errorf("the old edge %d (pid %d) had not exited 70 s after its upgrade", i+1, old)
		}
		b.pids[i] = newPID
		r.UpgradePerProcS = append(r.UpgradePerProcS, time.Since(ti).Seconds())
	}
	r.UpgradeS = time.Since(t0).Seconds()
	st, err := b.stats(ctx)
	if err != nil {
		return err
	}
	r.UpgradeP50Ms, r.UpgradeP99Ms = ms(st.hist.Quantile(0.50)), ms(st.hist.Quantile(0.99))
	r.UpgradeExtraP99Ms = r.UpgradeP99Ms - r.ActiveP99Ms
	r.UpgradeEnded = st.ended - before.ended
	r.UpgradeMessages = st.messages - before.messages
	r.UpAfterUpgrade = st.up
	b.log.Info("upgraded", "seconds", fmt.Sprintf("%.1f", r.UpgradeS), "p99_ms", r.UpgradeP99Ms, "ended", r.UpgradeEnded, "up", st.up)
	return nil
}

// waitFree waits until every address of addrs can be bound.
func (b *box) waitFree(addrs []string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, a := range addrs {
		for {
			ln, err := net.Listen("tcp4", a)
			if err == nil {
				_ = ln.Close()
				break
			}
			if time.Now().After(deadline) {
				b.log.Warn("address still taken", "addr", a, "err", err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitGone waits until none of pids exists (zombies count as gone).
func (b *box) waitGone(pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		alive := false
		for _, pid := range pids {
			if st := procState(pid); st != 0 && st != 'Z' {
				alive = true
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		var ws syscall.WaitStatus
		for {
			// Reap what this subreaper inherited.
			if pid, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type cpuTimes struct{ user, sys time.Duration }

func (c cpuTimes) sub(o cpuTimes) (u, s time.Duration) { return c.user - o.user, c.sys - o.sys }

// cpu sums the user and system time of the current proxy processes.
func (b *box) cpu() cpuTimes {
	var c cpuTimes
	for _, pid := range b.pids {
		for _, p := range procfs.Tree(pid) {
			if st, err := procfs.ReadProcStat(p); err == nil {
				c.user += time.Duration(st.UTime) * procfs.ClockTick
				c.sys += time.Duration(st.STime) * procfs.ClockTick
			}
		}
	}
	return c
}

// mem sums the memory figures of the current proxy processes.
func (b *box) mem() procfs.Mem {
	var sum procfs.Mem
	for _, pid := range b.pids {
		for _, p := range procfs.Tree(pid) {
			if m, err := procfs.ReadMem(p); err == nil {
				sum.RSS += m.RSS
				sum.Anon += m.Anon
				sum.File += m.File
				sum.Pss += m.Pss
			}
		}
	}
	return sum
}

// connsPerProc counts each proxy process's established sockets on the
// public port (its share of the clients).
func (b *box) connsPerProc() []int {
	var out []int
	for _, pid := range b.pids {
		n, _ := procfs.CountFDs(pid)
		out = append(out, n)
	}
	return out
}

func (b *box) stop() {
	for _, g := range b.gens {
		_ = g.Send(wire.CmdStop)
	}
	b.gens.Finish(60 * time.Second)
	for _, pid := range b.pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	b.waitGone(b.pids, 15*time.Second)
	for _, pid := range b.pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	b.ps.StopAll(10 * time.Second)
	b.waitGone(b.pids, 5*time.Second)
}

// kernelMem returns the TCP memory of /proc/net/sockstat and the Slab of
// /proc/meminfo, in KiB.
func kernelMem() (sockKiB, slabKiB int64) {
	if b, err := os.ReadFile("/proc/net/sockstat"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == "TCP:" {
				for i := 1; i+1 < len(f); i += 2 {
					if f[i] == "mem" {
						pages, _ := strconv.ParseInt(f[i+1], 10, 64)
						sockKiB = pages * int64(os.Getpagesize()) / 1024
					}
				}
			}
		}
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Slab:"); ok {
				slabKiB, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			}
		}
		_ = f.Close()
	}
	return sockKiB, slabKiB
}

// hostBusy is the busy time of all cores (/proc/stat).
func hostBusy() time.Duration {
	m, err := procfs.ReadCPUStat()
	if err != nil {
		return 0
	}
	var d time.Duration
	for cpu, t := range m {
		if cpu >= 0 {
			d += time.Duration(t.Busy) * procfs.ClockTick
		}
	}
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func render(res *Result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d connections (%d active at 1 msg/s), %d proxy processes, %d generators, %d backends, client %s, stamp %s\n\n",
		res.Conns, res.Active, res.Procs, res.Gens, res.Backends, res.Client, res.Stamp)
	fmt.Fprintf(&sb, "| figure |")
	for _, r := range res.Runs {
		fmt.Fprintf(&sb, " %s |", r.Proxy)
	}
	fmt.Fprintf(&sb, "\n|---|%s\n", strings.Repeat("---:|", len(res.Runs)))
	row := func(name string, f func(r Run) string) {
		fmt.Fprintf(&sb, "| %s |", name)
		for _, r := range res.Runs {
			fmt.Fprintf(&sb, " %s |", f(r))
		}
		sb.WriteString("\n")
	}
	row("time to establish all, s", func(r Run) string { return fmt.Sprintf("%.1f", r.ConnectS) })
	row("proxy CPU to establish all, s", func(r Run) string { return fmt.Sprintf("%.1f", r.ProxyCPUConnectS) })
	row("RSS of all proxy processes, at once, MiB", func(r Run) string { return fmt.Sprintf("%.0f", float64(r.RSSAtOnceKB)/1024) })
	row("RSS per connection, at once, KiB", func(r Run) string { return fmt.Sprintf("%.2f", r.KiBAtOnce) })
	row("RSS of all proxy processes, settled, MiB", func(r Run) string { return fmt.Sprintf("%.0f", float64(r.RSSSettledKB)/1024) })
	row("RSS per connection, settled, KiB", func(r Run) string { return fmt.Sprintf("%.2f", r.KiBSettled) })
	row("own memory (RssAnon) per connection, at once / settled, KiB", func(r Run) string {
		return fmt.Sprintf("%.2f / %.2f", r.AnonKiBAtOnce, r.AnonKiBSettled)
	})
	row("proportional set size (Pss) per connection, at once / settled, KiB", func(r Run) string {
		return fmt.Sprintf("%.2f / %.2f", r.PssKiBAtOnce, r.PssKiBSettled)
	})
	row("kernel TCP memory per connection (sockstat, whole test), KiB", func(r Run) string { return fmt.Sprintf("%.2f", r.SockMemKiB) })
	row("kernel slab per connection (meminfo, whole test), KiB", func(r Run) string { return fmt.Sprintf("%.2f", r.SlabKiB) })
	row("proxy CPU while holding, user + system, % of one core", func(r Run) string {
		return fmt.Sprintf("%.2f + %.2f = %.2f", r.HoldUserPct, r.HoldSysPct, r.HoldUserPct+r.HoldSysPct)
	})
	row("active echoes: p50 / p99, ms", func(r Run) string { return fmt.Sprintf("%.2f / %.2f", r.ActiveP50Ms, r.ActiveP99Ms) })
	row("active echoes in the hold window", func(r Run) string { return strconv.FormatUint(r.ActiveMessages, 10) })
	row("connections up after the hold / ended in it", func(r Run) string { return fmt.Sprintf("%d / %d", r.UpAfterHold, r.EndedDuringHold) })
	row("upgrade of every process: total s", func(r Run) string { return orDash(r.UpgradeS > 0, fmt.Sprintf("%.1f", r.UpgradeS)) })
	row("upgrade: p50 / p99 of active echoes, ms (extra p99)", func(r Run) string {
		return orDash(r.UpgradeS > 0, fmt.Sprintf("%.2f / %.2f (%+.2f)", r.UpgradeP50Ms, r.UpgradeP99Ms, r.UpgradeExtraP99Ms))
	})
	row("upgrade: connections ended / up after", func(r Run) string {
		return orDash(r.UpgradeS > 0, fmt.Sprintf("%d / %d", r.UpgradeEnded, r.UpAfterUpgrade))
	})
	row("storm: SIGKILL of every process to all back, s", func(r Run) string { return orDash(r.StormS > 0, fmt.Sprintf("%.1f", r.StormS)) })
	row("storm: proxy CPU, user + system, s", func(r Run) string {
		return orDash(r.StormS > 0, fmt.Sprintf("%.1f + %.1f", r.StormUserS, r.StormSysS))
	})
	row("storm: reconnects / fewest up", func(r Run) string {
		return orDash(r.StormS > 0, fmt.Sprintf("%d / %d", r.StormReconnects, r.StormDown))
	})
	row("host CPU while holding (every process and softirq), % of one core", func(r Run) string { return fmt.Sprintf("%.1f", r.HoldHostPct) })
	row("other processes' CPU during the connect, % of one core", func(r Run) string { return fmt.Sprintf("%.0f", r.HostOtherPctConnect) })
	if res.Error != "" {
		fmt.Fprintf(&sb, "\nerror: %s\n", res.Error)
	}
	return sb.String()
}

func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "—"
}

// procState is the state letter of /proc/PID/stat, 0 if there is no such
// process.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// Command benchrun runs the benchmark of bench/README.md: for every repeat,
// proxy (edge, HAProxy, nginx) and phase it starts three echo backends and the
// proxy under test, drives bench/loadgen processes through the phase, reads
// the proxy's CPU time and memory from /proc, and writes every figure to a
// JSON file in -out. With -md it also renders docs/BENCHMARKS.md; with
// -report it only renders the markdown from earlier JSON files.
//
// Repeats are interleaved across proxies, whose order rotates every repeat;
// -client picks the generators' WebSocket implementation.
//
// Placement: the proxy runs pinned to -proxy-cpu with one worker; generators
// and backends share -load-cpu. The primary figure is the proxy's own CPU
// time (utime+stime of its process tree) per operation over the window.
package main

import (
	"context"
	"encoding/json"
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/edgelb/edge/bench/internal/proc"
	"github.com/edgelb/edge/bench/internal/procfs"
)

// options are the command-line settings of one run.
type options struct {
	proxies  []string
	phases   []string
	repeats  int
	quick    bool
	outDir   string
	mdPath   string
	command  string
	proxyCPU int
	loadCPU  int
	client   string
	ip       string

	edgeBin    string
	backendBin string
	loadgenBin string
	haproxyBin string
	nginxBin   string

	idleConns  int
	idleProcs  int
	settle     time.Duration
	echoConns  int
	echoWindow time.Duration
	rateConns  int
	rateProcs  int
	rate       float64
	rateWindow time.Duration
	connWork   int
	connProcs  int
	connWindow time.Duration
	msgSize    int

	quietMax  float64
	quietWait time.Duration
	retries   int
}

var allPhases = []string{"idle", "idle-16k", "idle-1m", "echo", "rate", "connect-full", "connect-resume"}

// bigEcho is, for the idle phases that have one, the size of the message
// every connection echoes once after its small echo, before it is held:
// after it, a proxy that keeps buffers at their largest size holds them.
var bigEcho = map[string]int{"idle-16k": 16 << 10, "idle-1m": 1 << 20}

// bigInFlight bounds the 1 MiB echoes in flight over all generators, so
// that the load core (generators and backends) is not swamped and no
// process holds more than a few of them at once.
const bigInFlight = 64

// isIdle reports whether phase is one of the idle (memory) phases.
func isIdle(phase string) bool { return phase == "idle" || bigEcho[phase] > 0 }

// clients are the generator's WebSocket client implementations (-client).
var clients = []string{"gorilla", "gorilla-deflate", "gobwas"}

// clientWrites says, for the report, how each client writes a message and
// so which TLS records the proxy reads (bench/loadgen/client.go).
var clientWrites = map[string]string{
	"gorilla":         "gorilla/websocket, 1 KiB buffers: frames of at most 1 KiB, header and payload in one write, one TLS record per frame (16 KiB: 16 records); a 100-byte message is one 106-byte record",
	"gorilla-deflate": "gorilla/websocket as gorilla, offering permessage-deflate (no context takeover both ways, as gorilla asks) and compressing every message; the backends accept it (edge-backend -deflate)",
	"gobwas":          "gobwas/ws, ws.WriteHeaderBuffer and the masked payload into a pooled 16 KiB bufio.Writer flushed per message: one frame and one write per message up to 16 KiB, cut into records by crypto/tls; a 100-byte message is one 106-byte record",
}

// edgeFrames is edge with frame-aware splicing turned on in its pool (see
// frameAware), measured beside edge in its default opaque mode for the
// frame-aware overhead figure.
const edgeFrames = "edge-frames"

// allProxies lists the proxies in the order a repeat runs them: the two edge
// modes back to back, so that they see the same state of the shared host.
var allProxies = []string{"edge", edgeFrames, "haproxy", "nginx"}

// onlyPhases restricts a proxy to some phases. edge-frames exists for one
// figure, CPU per message in the closed-loop echo against opaque edge;
// running it through the other phases would lengthen the full run by a
// quarter for figures nobody compares.
// With the gorilla-deflate client edge-frames also runs the idle phase:
// its pool counts compressed messages inflated (deflate: limit, the
// default with its message limit), and what an idle connection with
// deflate negotiated holds there is the figure.
func onlyPhases(client string) map[string][]string {
	if client == "gorilla-deflate" {
		return map[string][]string{edgeFrames: {"idle", "echo"}}
	}
	return map[string][]string{edgeFrames: {"echo"}}
}

// runsPhase reports whether proxy takes part in phase with client.
func runsPhase(proxy, phase, client string) bool {
	only, ok := onlyPhases(client)[proxy]
	return !ok || slices.Contains(only, phase)
}

// usesEdge reports whether proxy is one of the edge modes, which run the
// edge binary.
func usesEdge(proxy string) bool { return proxy == "edge" || proxy == edgeFrames }

func main() {
	var o options
	var proxies, phases, report string
	flag.StringVar(&proxies, "proxies", strings.Join(allProxies, ","), "proxies to measure, comma-separated ("+edgeFrames+": edge in frame-aware mode, echo phase only)")
	flag.StringVar(&phases, "phases", strings.Join(allPhases, ","), "phases to run, comma-separated")
	flag.IntVar(&o.repeats, "repeats", 3, "repeats of every phase (interleaved across proxies, their order rotated every repeat)")
	flag.StringVar(&o.ip, "ip", "127.0.0.1", "loopback address the proxy, its admin listener and the backends listen on (ports 18443, 19901, 19001-19003)")
	flag.StringVar(&o.client, "client", "gorilla", "the generators' WebSocket client: "+strings.Join(clients, " or "))
	flag.BoolVar(&o.quick, "quick", false, "small counts and short windows, to check the setup")
	flag.StringVar(&o.outDir, "out", "bench/out", "directory for JSON results, configs and logs")
	flag.StringVar(&o.mdPath, "md", "", "also write the markdown report here (e.g. docs/BENCHMARKS.md)")
	flag.StringVar(&report, "report", "", "only render -md from these JSON result files (comma-separated)")
	flag.StringVar(&o.command, "command", "", "the command line to quote in the report (default: this one)")
	flag.IntVar(&o.proxyCPU, "proxy-cpu", 0, "core of the proxy under test")
	flag.IntVar(&o.loadCPU, "load-cpu", 1, "core of the generators and backends")
	flag.StringVar(&o.edgeBin, "edge-bin", "bin/edge", "edge binary, run as EDGE_BIN -config FILE")
	flag.StringVar(&o.backendBin, "backend-bin", "bench/out/bin/edge-backend", "echo backend binary (-listen ADDR -id NAME)")
	flag.StringVar(&o.loadgenBin, "loadgen-bin", "bench/out/bin/loadgen", "load generator binary")
	flag.StringVar(&o.haproxyBin, "haproxy-bin", "haproxy", "HAProxy binary")
	flag.StringVar(&o.nginxBin, "nginx-bin", "nginx", "nginx binary")
	flag.IntVar(&o.idleConns, "idle-conns", 9800, "idle phase: connections held")
	flag.IntVar(&o.idleProcs, "idle-procs", 4, "idle phase: generator processes")
	flag.DurationVar(&o.settle, "settle", 30*time.Second, "idle phase: delay before the settled RSS reading")
	flag.IntVar(&o.echoConns, "echo-conns", 200, "echo phase: connections")
	flag.DurationVar(&o.echoWindow, "echo-window", 20*time.Second, "echo phase: measured window")
	flag.IntVar(&o.rateConns, "rate-conns", 5000, "rate phase: connections")
	flag.IntVar(&o.rateProcs, "rate-procs", 2, "rate phase: generator processes")
	flag.Float64Var(&o.rate, "rate", 2, "rate phase: messages per second per connection")
	flag.DurationVar(&o.rateWindow, "rate-window", 20*time.Second, "rate phase: measured window")
	flag.IntVar(&o.connWork, "connect-workers", 32, "connect phases: concurrent loops per generator process")
	flag.IntVar(&o.connProcs, "connect-procs", 2, "connect phases: generator processes")
	flag.DurationVar(&o.connWindow, "connect-window", 10*time.Second, "connect phases: measured window")
	flag.IntVar(&o.msgSize, "size", 100, "echo and rate phases: message size in bytes")
	flag.Float64Var(&o.quietMax, "quiet-max", 25, "shared host: foreign CPU (% of one core) under which a phase may start, and above which its window is retried")
	flag.DurationVar(&o.quietWait, "quiet-wait", 20*time.Second, "shared host: longest wait for foreign CPU to drop under -quiet-max before a phase")
	flag.IntVar(&o.retries, "retries", 1, "shared host: extra attempts of a phase whose window saw more than -quiet-max foreign CPU; the quietest attempt is kept")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if o.command == "" {
		o.command = strings.Join(os.Args, " ")
	}
	if report != "" {
		if o.mdPath == "" {
			log.Error("-report needs -md")
			os.Exit(2)
		}
		if err := renderFiles(strings.Split(report, ","), o.mdPath); err != nil {
			log.Error("render report", "err", err)
			os.Exit(1)
		}
		return
	}
	o.proxies = splitList(proxies)
	o.phases = splitList(phases)
	if o.quick {
		o.quickDefaults()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		log.Error("benchmark failed", "err", err)
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// quickDefaults shrinks every flag the user did not set.
func (o *options) quickDefaults() {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	def := func(name string, apply func()) {
		if !set[name] {
			apply()
		}
	}
	def("repeats", func() { o.repeats = 1 })
	def("idle-conns", func() { o.idleConns = 2000 })
	def("idle-procs", func() { o.idleProcs = 2 })
	def("settle", func() { o.settle = 5 * time.Second })
	def("echo-window", func() { o.echoWindow = 5 * time.Second })
	def("rate-conns", func() { o.rateConns = 1000 })
	def("rate-window", func() { o.rateWindow = 5 * time.Second })
	def("connect-window", func() { o.connWindow = 4 * time.Second })
	def("quiet-wait", func() { o.quietWait = 5 * time.Second })
	def("retries", func() { o.retries = 0 })
}

// Result is the JSON file one run writes.
type Result struct {
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	Command  string            `json:"command"`
	Quick    bool              `json:"quick"`
	Machine  procfs.Machine    `json:"machine"`
	Versions map[string]string `json:"versions"`
	Settings map[string]string `json:"settings"`
	Runs     []Run             `json:"runs"`
	// FrameOverhead compares the two edge modes in the echo phase; absent
	// when the run did not measure both.
	FrameOverhead *FrameOverhead `json:"frame_overhead,omitempty"`
}

// Run is one phase of one proxy in one repeat.
type Run struct {
	Proxy   string             `json:"proxy"`
	Phase   string             `json:"phase"`
	Repeat  int                `json:"repeat"`
	Metrics map[string]float64 `json:"metrics"`
	// Saturated names the core that was at least 95% busy during the
	// window ("cpu0", "cpu1", both, or "none").
	Saturated string `json:"saturated"`
	Cipher    string `json:"cipher,omitempty"`
	Curve     string `json:"curve,omitempty"`
	// Client is the generators' WebSocket client (-client); empty in
	// results from before there was a choice, which all used gorilla.
	Client string `json:"client,omitempty"`
	Errors uint64 `json:"errors"`
	Error  string `json:"error,omitempty"`
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	if n := procfs.OnlineCPUs(); n < 2 && o.proxyCPU != o.loadCPU {
		log.Warn("fewer than two cores online; placement will not hold", "cpus", n)
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	dir, err := filepath.Abs(filepath.Join(o.outDir, "run-"+stamp))
	if err != nil {
		return fmt.Errorf("resolve output dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nginx-tmp"), 0o755); err != nil {
		return fmt.Errorf("create output dir %s: %w", dir, err)
	}
	if err := writeCert(dir); err != nil {
		return err
	}
	_, edgeErr := os.Stat(o.edgeBin)
	proxies, skipped, err := selectProxies(o.proxies, edgeErr == nil)
	if err != nil {
		return err
	}
	if len(skipped) > 0 {
		log.Warn("edge binary missing; skipping", "proxies", strings.Join(skipped, ","), "bin", o.edgeBin, "err", edgeErr)
	}
	if slices.Contains(proxies, edgeFrames) != slices.Contains(proxies, "edge") {
		log.Warn("the frame-aware overhead figure needs both edge and " + edgeFrames + " in -proxies")
	}
	if ip, err := netip.ParseAddr(o.ip); err != nil || !ip.Is4() || !ip.IsLoopback() {
		return fmt.Errorf("parse -ip %q: want an IPv4 loopback address", o.ip)
	}
	if !slices.Contains(clients, o.client) {
		return fmt.Errorf("unknown client %q (want %s)", o.client, strings.Join(clients, " or "))
	}
	for _, ph := range o.phases {
		if !slices.Contains(allPhases, ph) {
			return fmt.Errorf("unknown phase %q (want %s)", ph, strings.Join(allPhases, ", "))
		}
	}
	r := &runner{opt: o, addrs: addrsOn(o.ip), dir: dir, procs: proc.NewGroup(), log: log}
	defer r.procs.StopAll(3 * time.Second)

	res := Result{
		Started:  time.Now().UTC(),
		Command:  o.command,
		Quick:    o.quick,
		Machine:  procfs.ReadMachine(),
		Versions: versions(o, proxies),
		Settings: o.settings(),
	}
	outPath := filepath.Join(o.outDir, "results-"+stamp+".json")
	save := func() error {
		res.Finished = time.Now().UTC()
		res.FrameOverhead = frameOverhead([]Result{res})
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if err := os.WriteFile(outPath, b, 0o644); err != nil {
			return fmt.Errorf("write results %s: %w", outPath, err)
		}
		return os.WriteFile(filepath.Join(o.outDir, "latest.json"), b, 0o644)
	}
	for rep := 1; rep <= o.repeats; rep++ {
		for _, st := range plan(proxies, o.phases, rep, o.client) {
			p, ph := st.proxy, st.phase
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Info("phase", "repeat", rep, "proxy", p, "phase", ph)
			run := r.phase(ctx, p, ph)
			// Memory (the idle phases) does not depend on the host's load,
			// and those phases are the longest: they are never retried.
			for try := 1; !isIdle(ph) && try <= o.retries && ctx.Err() == nil && run.Metrics["foreign_cpu_pct"] > o.quietMax; try++ {
				log.Info("foreign load during the window; retrying", "proxy", p, "phase", ph,
					"foreign_cpu_pct", run.Metrics["foreign_cpu_pct"])
				again := r.phase(ctx, p, ph)
				if again.Error == "" && again.Metrics["foreign_cpu_pct"] < run.Metrics["foreign_cpu_pct"] {
					run = again
				}
			}
			run.Repeat = rep
			run.Client = o.client
			if run.Error != "" {
				log.Error("phase failed", "proxy", p, "phase", ph, "err", run.Error)
			} else {
				log.Info("phase done", "proxy", p, "phase", ph, "metrics", fmtMetrics(run.Metrics), "saturated", run.Saturated, "errors", run.Errors)
			}
			res.Runs = append(res.Runs, run)
			if err := save(); err != nil {
				return err
			}
		}
	}
	log.Info("results written", "file", outPath)
	if o.mdPath != "" {
		if err := renderFiles([]string{outPath}, o.mdPath); err != nil {
			return err
		}
		log.Info("report written", "file", o.mdPath)
	}
	return nil
}

// selectProxies checks the names of -proxies and keeps those that can run,
// in the order of allProxies whatever the order given, so that the two edge
// modes always run back to back. skipped are the edge modes, dropped when
// the edge binary is missing.
func selectProxies(names []string, haveEdge bool) (keep, skipped []string, err error) {
	for _, p := range names {
		if !slices.Contains(allProxies, p) {
			return nil, nil, fmt.Errorf("unknown proxy %q (want %s)", p, strings.Join(allProxies, ", "))
		}
	}
	for _, p := range allProxies {
		switch {
		case !slices.Contains(names, p):
		case usesEdge(p) && !haveEdge:
			skipped = append(skipped, p)
		default:
			keep = append(keep, p)
		}
	}
	return keep, skipped, nil
}

// step is one phase of one proxy within a repeat.
type step struct{ phase, proxy string }

// plan orders the steps of repeat rep (from 1): phase after phase, each run
// by every proxy in turn (those onlyPhases allows), so that drift of the
// shared host spreads over all of them alike. The order of the proxies
// rotates by one every repeat, so that none is always first after a phase
// change or always last: the per-repeat CPU ratios then do not carry the
// same position bias every time. The two edge modes rotate as one, back to
// back.
func plan(proxies, phases []string, rep int, client string) []step {
	var units [][]string
	for _, p := range proxies {
		if p == edgeFrames && len(units) > 0 && slices.Contains(units[len(units)-1], "edge") {
			units[len(units)-1] = append(units[len(units)-1], p)
			continue
		}
		units = append(units, []string{p})
	}
	if len(units) > 0 {
		k := (rep - 1) % len(units)
		units = append(units[k:], units[:k]...)
	}
	var out []step
	for _, ph := range phases {
		for _, u := range units {
			for _, p := range u {
				if runsPhase(p, ph, client) {
					out = append(out, step{phase: ph, proxy: p})
				}
			}
		}
	}
	return out
}

func fmtMetrics(m map[string]float64) string {
	keys := sortedKeys(m)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.4g", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func (o options) settings() map[string]string {
	s := map[string]string{
		"placement":       fmt.Sprintf("proxy taskset -c %d (one worker: nbthread 1, worker_processes 1, GOMAXPROCS=1); generators and 3 backends taskset -c %d", o.proxyCPU, o.loadCPU),
		"idle":            fmt.Sprintf("%d connections over %d generator processes, one 16-byte echo each, settle %v", o.idleConns, o.idleProcs, o.settle),
		"idle_big":        fmt.Sprintf("idle-16k, idle-1m: the idle phase, each connection then echoing one 16 KiB (resp. 1 MiB) message before it is held; 1 MiB echoes at most %d in flight over all generators, streamed through a 32 KiB buffer", bigInFlight),
		"client":          o.client + " (" + clientWrites[o.client] + ")",
		"echo":            fmt.Sprintf("closed loop, %d connections, %d-byte messages, window %v", o.echoConns, o.msgSize, o.echoWindow),
		"rate":            fmt.Sprintf("%d connections x %g msg/s, %d-byte messages, window %v, latency from scheduled send", o.rateConns, o.rate, o.msgSize, o.rateWindow),
		"connect":         fmt.Sprintf("%d processes x %d loops of dial+TLS 1.3 handshake+upgrade+16-byte echo+close, window %v", o.connProcs, o.connWork, o.connWindow),
		"tls":             "TLS 1.3, TLS_AES_128_GCM_SHA256, X25519, ECDSA P-256 self-signed certificate, session tickets on",
		"backends":        o.backendBin,
		"addresses":       fmt.Sprintf("proxy %s, admin %s, backends %s:19001-19003; clients from 127.0.0.2 and up", net.JoinHostPort(o.ip, "18443"), net.JoinHostPort(o.ip, "19901"), o.ip),
		"forwarded":       "X-Forwarded-For added by every proxy",
		"balance":         "least connections over 3 backends",
		"tunnel_timeouts": "1h",
		"shared_host":     fmt.Sprintf("a phase starts once other processes take at most %g%% of a core (waiting at most %v); a window with more is retried %d time(s) (not the idle phases), keeping the quietest", o.quietMax, o.quietWait, o.retries),
	}
	if slices.Contains(o.proxies, edgeFrames) {
		s["frame_aware"] = fmt.Sprintf("%s: edge's configuration plus websocket: {max_frame_bytes: %d, ping_interval: %s, ping_timeout: %s} on the pool; echo phase only",
			edgeFrames, frameAware.MaxFrameBytes, frameAware.PingInterval, frameAware.PingTimeout)
	}
	return s
}

func versions(o options, proxies []string) map[string]string {
	v := map[string]string{"go": runtime.Version()}
	first := func(b []byte) string {
		s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		return s
	}
	for _, p := range proxies {
		switch p {
		case "haproxy":
			if out, err := exec.Command(o.haproxyBin, "-v").CombinedOutput(); err == nil {
				v["haproxy"] = first(out)
			}
		case "nginx":
			if out, err := exec.Command(o.nginxBin, "-v").CombinedOutput(); err == nil {
				v["nginx"] = first(out)
			}
			if out, err := exec.Command("openssl", "version").CombinedOutput(); err == nil {
				v["openssl"] = first(out)
			}
		case "edge", edgeFrames:
			if _, ok := v["edge"]; ok {
				continue
			}
			if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
				rev := first(out)
				if st, err := exec.Command("git", "status", "--porcelain").Output(); err == nil && len(st) > 0 {
					rev += "+dirty"
				}
				v["edge"] = "git " + rev
			}
		}
	}
	return v
}

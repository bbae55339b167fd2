package main

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/template"
	"time"

	"github.com/edgelb/edge/bench/internal/proc"
	"github.com/edgelb/edge/bench/internal/procfs"
	"github.com/edgelb/edge/bench/internal/stats"
	"github.com/edgelb/edge/bench/internal/tlscert"
	"github.com/edgelb/edge/bench/internal/wire"
)

//go:embed templates/*.tmpl
var templates embed.FS

// runner runs phases; it owns the children it starts.
type runner struct {
	opt   options
	addrs addrs
	dir   string
	procs *proc.Group
	log   *slog.Logger
}

type backendAddr struct{ ID, Addr string }

// addrs are the addresses the benchmark listens on, all on the loopback
// address -ip: on a shared host another process may hold a port of the
// default 127.0.0.1, and any other address of 127.0.0.0/8 works alike.
type addrs struct {
	listen, admin string
	backends      []backendAddr
}

func addrsOn(ip string) addrs {
	return addrs{
		listen: net.JoinHostPort(ip, "18443"),
		admin:  net.JoinHostPort(ip, "19901"),
		backends: []backendAddr{
			{"b1", net.JoinHostPort(ip, "19001")},
			{"b2", net.JoinHostPort(ip, "19002")},
			{"b3", net.JoinHostPort(ip, "19003")},
		},
	}
}

// all lists every address the benchmark listens on.
func (a addrs) all() []string {
	out := []string{a.listen, a.admin}
	for _, b := range a.backends {
		out = append(out, b.Addr)
	}
	return out
}

// writeCert writes the benchmark's certificate (see tlscert) for localhost
// and 127.0.0.1, plus cert-and-key.pem: HAProxy takes the certificate and
// its key in one file.
func writeCert(dir string) error {
	certPEM, keyPEM, err := tlscert.Write(dir, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert-and-key.pem"), slices.Concat(certPEM, keyPEM), 0o644); err != nil {
		return fmt.Errorf("write cert-and-key.pem: %w", err)
	}
	return nil
}

// configData feeds the proxy configuration templates.
type configData struct {
	Dir         string
	Listen      string
	Admin       string
	Backends    []backendAddr
	MaxConn     int
	NoFile      int
	WorkerConns int
	// WebSocket, when set, turns on edge's frame-aware mode in its pool.
	WebSocket *wsSettings
}

// wsSettings is the websocket block of an edge pool.
type wsSettings struct {
	MaxFrameBytes int
	PingInterval  string
	PingTimeout   string
}

// frameAware is the websocket block of edge-frames: a frame limit and
// heartbeats, the settings of conf/testdata/full.yaml. Under the echo load
// no frame comes near the limit and no connection is silent long enough
// for a ping, so what the figure measures is the per-frame bookkeeping.
var frameAware = wsSettings{MaxFrameBytes: 1 << 20, PingInterval: "30s", PingTimeout: "10s"}

// configFor returns the template data of the named proxy.
func (r *runner) configFor(proxy string) configData {
	// 20,000 descriptors per process hold 9,9xx proxied connections at two
	// descriptors each. nginx starts closing connections still in their
	// TLS handshake once fewer than 1/16 of worker_connections are free
	// (ngx_drain_connections: "worker_connections are not enough, reusing
	// connections"), so it needs 16/15 of the 19,600 it will use; above the
	// descriptor limit that is only a startup warning.
	d := configData{Dir: r.dir, Listen: r.addrs.listen, Admin: r.addrs.admin, Backends: r.addrs.backends,
		MaxConn: 9950, NoFile: 20000, WorkerConns: 21000}
	if proxy == edgeFrames {
		ws := frameAware
		d.WebSocket = &ws
	}
	return d
}

func (r *runner) renderConfig(tmplName, out string, data configData) (string, error) {
	t, err := template.ParseFS(templates, "templates/"+tmplName)
	if err != nil {
		return "", fmt.Errorf("parse template %s: %w", tmplName, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render template %s: %w", tmplName, err)
	}
	path := filepath.Join(r.dir, out)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write config %s: %w", path, err)
	}
	return path, nil
}

// startProxy starts the named proxy pinned to the proxy core with one worker.
func (r *runner) startProxy(ctx context.Context, name, tag string) (*proc.Proc, error) {
	var argv, env []string
	switch name {
	case "haproxy":
		cfg, err := r.renderConfig("haproxy.cfg.tmpl", "haproxy.cfg", r.configFor(name))
		if err != nil {
			return nil, err
		}
		// -db: foreground, no master process: one process to measure.
		argv = []string{r.opt.haproxyBin, "-db", "-f", cfg}
	case "nginx":
		cfg, err := r.renderConfig("nginx.conf.tmpl", "nginx.conf", r.configFor(name))
		if err != nil {
			return nil, err
		}
		argv = []string{r.opt.nginxBin, "-c", cfg, "-p", r.dir}
	case "edge", edgeFrames:
		// Both edge modes come from one template, so that the websocket
		// block is the only difference between them.
		cfg, err := r.renderConfig("edge.yaml.tmpl", name+".yaml", r.configFor(name))
		if err != nil {
			return nil, err
		}
		argv = []string{r.opt.edgeBin, "-config", cfg}
		env = []string{"GOMAXPROCS=1"}
	default:
		return nil, fmt.Errorf("unknown proxy %q", name)
	}
	p, err := r.procs.Start(name, env, filepath.Join(r.dir, tag+"-"+name+".log"), nil, nil, proc.Pin(r.opt.proxyCPU, argv...)...)
	if err != nil {
		return nil, err
	}
	if err := proc.WaitListening(ctx, p, r.addrs.listen, 15*time.Second); err != nil {
		p.Stop(3 * time.Second)
		return nil, err
	}
	return p, nil
}

func (r *runner) startBackends(ctx context.Context, tag string) ([]*proc.Proc, error) {
	var out []*proc.Proc
	for _, b := range r.addrs.backends {
		p, err := r.procs.Start("backend-"+b.ID, nil, filepath.Join(r.dir, tag+"-backend-"+b.ID+".log"), nil, nil,
			proc.Pin(r.opt.loadCPU, r.backendArgv(b.Addr, b.ID)...)...)
		if err != nil {
			stopAll(out)
			return nil, err
		}
		out = append(out, p)
	}
	for i, b := range r.addrs.backends {
		if err := proc.WaitListening(ctx, out[i], b.Addr, 10*time.Second); err != nil {
			stopAll(out)
			return nil, err
		}
	}
	return out, nil
}

func stopAll(ps []*proc.Proc) {
	for _, p := range ps {
		p.Stop(3 * time.Second)
	}
}

// phase runs one phase against one proxy with fresh backends and a fresh
// proxy process, so that phases do not inherit each other's heap.
func (r *runner) phase(ctx context.Context, proxy, phase string) Run {
	run := Run{Proxy: proxy, Phase: phase, Metrics: map[string]float64{}}
	if err := portsFree(r.addrs.all()); err != nil {
		run.Error = err.Error()
		return run
	}
	tag := fmt.Sprintf("%s-%s-%d", phase, proxy, time.Now().UnixNano()%1e6)
	bes, err := r.startBackends(ctx, tag)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer stopAll(bes)
	px, err := r.startProxy(ctx, proxy, tag)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer px.Stop(5 * time.Second)
	// Let the proxy finish starting up before the baseline reading, and
	// let the shared host quiet down.
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	f, waited := r.waitQuiet(ctx)
	run.Metrics["foreign_before_pct"] = f
	run.Metrics["quiet_wait_s"] = waited.Seconds()
	switch phase {
	case "idle", "idle-16k", "idle-1m":
		err = r.idle(ctx, px, &run, bigEcho[phase])
	case "echo":
		err = r.loop(ctx, px, &run, false)
	case "rate":
		err = r.loop(ctx, px, &run, true)
	case "connect-full":
		err = r.connect(ctx, px, &run, false)
	case "connect-resume":
		err = r.connect(ctx, px, &run, true)
	}
	if err != nil {
		run.Error = err.Error()
	}
	if px.Exited() {
		run.Error = errors.Join(err, fmt.Errorf("%s exited during the phase: %v", proxy, px.Err())).Error()
	}
	// JSON has no NaN: a metric without operations is left out.
	for k, v := range run.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			delete(run.Metrics, k)
		}
	}
	return run
}

// portsFree fails when something already accepts connections on one of
// addrs. Without this check another process on the benchmark's ports (a
// proxy left running, a profile of edge) would pass the readiness checks,
// take the load in place of the proxy under test, and be disturbed by it.
func portsFree(addrs []string) error {
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return fmt.Errorf("%s is already in use by another process; stop it before running the benchmark", a)
		}
	}
	return nil
}

// waitQuiet samples the CPU that processes outside the benchmark take, one
// second at a time, until it is at most -quiet-max percent of a core or
// -quiet-wait has passed. It returns the last sample and the time waited.
func (r *runner) waitQuiet(ctx context.Context) (float64, time.Duration) {
	start := time.Now()
	for {
		t0, c0, o0 := time.Now(), sampleCores(), treeCPU(os.Getpid())
		select {
		case <-ctx.Done():
			return 0, time.Since(start)
		case <-time.After(time.Second):
		}
		t1, c1, o1 := time.Now(), sampleCores(), treeCPU(os.Getpid())
		f := foreignPct(c0, c1, o1-o0, t1.Sub(t0))
		if f <= r.opt.quietMax || time.Since(start) >= r.opt.quietWait {
			return f, time.Since(start)
		}
	}
}

// foreignPct is the CPU the cores spent beyond ours (the orchestrator's
// process tree), in percent of one core.
func foreignPct(c0, c1 coreSample, ours, elapsed time.Duration) float64 {
	var busy uint64
	for core, after := range c1 {
		busy += after.Busy - c0[core].Busy
	}
	foreign := time.Duration(busy)*procfs.ClockTick - ours
	return max(0, 100*foreign.Seconds()/elapsed.Seconds())
}

// srcPerProc is how many source addresses each generator process gets: the
// processes use disjoint ranges of 127.0.0.2 and up.
const srcPerProc = 200

func (r *runner) genArgs(i int, mode string, extra ...string) []string {
	return append([]string{"-mode", mode, "-client", r.opt.client, "-target", r.addrs.listen, "-host", "localhost", "-path", "/echo",
		"-src-base", "127.0.0.2", "-src-offset", strconv.Itoa(i * srcPerProc), "-src-count", strconv.Itoa(srcPerProc),
		"-max-life", "15m"}, extra...)
}

// startGens starts one generator on the load core per part, each with the
// arguments extra returns for its part.
func (r *runner) startGens(parts []int, mode string, extra func(n int) []string) (proc.Gens, error) {
	var gs proc.Gens
	for i, n := range parts {
		name := fmt.Sprintf("loadgen-%s-%d", mode, i)
		argv := append([]string{r.opt.loadgenBin}, r.genArgs(i, mode, extra(n)...)...)
		g, err := r.procs.StartGen(name, filepath.Join(r.dir, name+".log"), proc.Pin(r.opt.loadCPU, argv...)...)
		if err != nil {
			gs.Finish(genQuit)
			return nil, err
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// genQuit is how long a generator may take to close its connections and
// exit once told to.
const genQuit = 30 * time.Second

// allWithin waits for one event of kind want from every generator, for at
// most timeout.
func allWithin(ctx context.Context, gs proc.Gens, want string, timeout time.Duration) ([]wire.Event, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("not every generator sent %q within %v", want, timeout))
	defer cancel()
	return gs.All(ctx, want)
}

func sumErrors(run *Run, evs []wire.Event) {
	for _, e := range evs {
		run.Errors += e.Errors
		if e.ErrorSample != "" && run.Error == "" {
			run.Error = "generator: " + e.ErrorSample
		}
		if e.Cipher != "" {
			run.Cipher, run.Curve = e.Cipher, e.Curve
		}
	}
}

// window holds the readings taken at the edges of a measured window.
type window struct {
	t0, t1 time.Time
	u0, u1 usage
	c0, c1 coreSample
	// o0, o1 are the CPU time of this orchestrator and all its children
	// (proxy, backends, generators): what the cores spent beyond that is
	// foreign load on a shared host.
	o0, o1 time.Duration
}

func (w *window) begin(pid int) {
	w.t0, w.u0, w.c0, w.o0 = time.Now(), measure(pid), sampleCores(), treeCPU(os.Getpid())
}

func (w *window) end(pid int) {
	w.t1, w.u1, w.c1, w.o1 = time.Now(), measure(pid), sampleCores(), treeCPU(os.Getpid())
}

// record stores CPU and core figures; ops is the operation count of the
// window, unit the name of one operation in the metric key.
func (r *runner) record(run *Run, w *window, ops uint64, unit string) {
	secs := w.t1.Sub(w.t0).Seconds()
	cpu := (w.u1.cpu - w.u0.cpu).Seconds()
	c0 := coreBusy(w.c0, w.c1, r.opt.proxyCPU)
	c1 := coreBusy(w.c0, w.c1, r.opt.loadCPU)
	run.Metrics["cpu_us_per_"+unit] = stats.PerOp(cpu*1e6, ops)
	run.Metrics[unit+"s_per_s"] = float64(ops) / secs
	run.Metrics["proxy_cpu_pct"] = 100 * cpu / secs
	run.Metrics["proxy_core_busy_pct"] = 100 * c0
	run.Metrics["load_core_busy_pct"] = 100 * c1
	// What else ran on the proxy's core: its busy time beyond the proxy's
	// own CPU (foreign processes, and softirq time the kernel does not
	// charge to the proxy). Foreign CPU above is over both cores.
	run.Metrics["proxy_core_others_pct"] = max(0, 100*c0-run.Metrics["proxy_cpu_pct"])
	run.Saturated = saturated(c0, c1)
	run.Metrics["foreign_cpu_pct"] = foreignPct(w.c0, w.c1, w.o1-w.o0, w.t1.Sub(w.t0))
}

// saturated names the cores at least 95% busy.
func saturated(proxyCore, loadCore float64) string {
	const full = 0.95
	switch {
	case proxyCore >= full && loadCore >= full:
		return "both"
	case proxyCore >= full:
		return "proxy core"
	case loadCore >= full:
		return "load core"
	default:
		return "none"
	}
}

const readyTimeout = 5 * time.Minute

// idle measures resident memory per held connection. With big > 0 every
// connection echoes one message of big bytes after its small echo, before
// it is held; the 1 MiB ones at most bigInFlight at a time over all
// generators.
func (r *runner) idle(ctx context.Context, px *proc.Proc, run *Run, big int) error {
	before := measure(px.PID())
	var w window
	w.begin(px.PID())
	bigConc := 32
	if big > 64<<10 {
		bigConc = max(1, bigInFlight/r.opt.idleProcs)
	}
	gs, err := r.startGens(stats.Split(r.opt.idleConns, r.opt.idleProcs), "idle", func(n int) []string {
		return []string{"-conns", strconv.Itoa(n), "-dial-concurrency", "32",
			"-big", strconv.Itoa(big), "-big-concurrency", strconv.Itoa(bigConc)}
	})
	if err != nil {
		return err
	}
	defer gs.Finish(genQuit)
	ready, err := allWithin(ctx, gs, wire.EventReady, readyTimeout)
	sumErrors(run, ready)
	if err != nil {
		return err
	}
	w.end(px.PID())
	after := w.u1
	var conns int
	for _, e := range ready {
		conns += e.Conns
	}
	n := uint64(conns)
	// Connection setup cost: full handshakes, upgrades and one echo each.
	r.record(run, &w, n, "conn")
	delete(run.Metrics, "conns_per_s")
	run.Metrics["setup_conns_per_s"] = float64(n) / w.t1.Sub(w.t0).Seconds()
	run.Metrics["conns"] = float64(conns)
	run.Metrics["rss_before_kib"] = float64(before.rssKB)
	run.Metrics["rss_after_kib"] = float64(after.rssKB)
	run.Metrics["kib_per_conn"] = stats.PerOp(float64(after.rssKB-before.rssKB), n)
	run.Metrics["fds"] = float64(after.fds)
	run.Metrics["fds_per_conn"] = stats.PerOp(float64(after.fds-before.fds), n)
	if err := gs.Send(wire.CmdStart); err != nil {
		return err
	}
	// The settle delay: the proxy holds the connections untouched, so
	// runtimes that return memory lazily (Go's scavenger, allocator caches)
	// get the chance to. Its CPU over this time is the idle cost.
	var s window
	s.begin(px.PID())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.opt.settle):
	}
	s.end(px.PID())
	run.Metrics["rss_settled_kib"] = float64(s.u1.rssKB)
	run.Metrics["kib_per_conn_settled"] = stats.PerOp(float64(s.u1.rssKB-before.rssKB), n)
	run.Metrics["idle_proxy_cpu_pct"] = 100 * (s.u1.cpu - s.u0.cpu).Seconds() / s.t1.Sub(s.t0).Seconds()
	if err := gs.Send(wire.CmdStop); err != nil {
		return err
	}
	res, err := allWithin(ctx, gs, wire.EventResult, time.Minute)
	sumErrors(run, res)
	return err
}

// loop runs the closed-loop echo (paced false) or the fixed-rate phase.
func (r *runner) loop(ctx context.Context, px *proc.Proc, run *Run, paced bool) error {
	mode, conns, procs, win := "echo", r.opt.echoConns, 1, r.opt.echoWindow
	if paced {
		mode, conns, procs, win = "rate", r.opt.rateConns, r.opt.rateProcs, r.opt.rateWindow
	}
	gs, err := r.startGens(stats.Split(conns, procs), mode, func(n int) []string {
		return []string{"-conns", strconv.Itoa(n), "-size", strconv.Itoa(r.opt.msgSize),
			"-rate", strconv.FormatFloat(r.opt.rate, 'g', -1, 64), "-dial-concurrency", "32"}
	})
	if err != nil {
		return err
	}
	defer gs.Finish(genQuit)
	w, res, err := measureWindow(ctx, gs, px, run, win)
	if err != nil {
		return err
	}
	var msgs uint64
	var hist stats.Histogram
	var held int
	for _, e := range res {
		msgs += e.Messages
		held += e.Conns
		hist.Merge(e.Latency)
	}
	r.record(run, &w, msgs, "msg")
	run.Metrics["conns"] = float64(held)
	if paced {
		us := func(d time.Duration) float64 { return float64(d) / 1e3 }
		run.Metrics["p50_us"] = us(hist.Quantile(0.50))
		run.Metrics["p99_us"] = us(hist.Quantile(0.99))
		run.Metrics["p999_us"] = us(hist.Quantile(0.999))
		run.Metrics["max_us"] = us(hist.Max)
		run.Metrics["mean_us"] = us(hist.Mean())
		// Messages sent on schedule divided by those expected: below 1 the
		// system could not keep the offered rate.
		want := float64(held) * r.opt.rate * w.t1.Sub(w.t0).Seconds()
		run.Metrics["rate_kept"] = float64(msgs) / want
	}
	return nil
}

// measureWindow waits until every generator is ready, lets them run for win
// while the proxy's CPU and memory are sampled at both ends, stops them, and
// returns the window with their results.
func measureWindow(ctx context.Context, gs proc.Gens, px *proc.Proc, run *Run, win time.Duration) (window, []wire.Event, error) {
	var w window
	ready, err := allWithin(ctx, gs, wire.EventReady, readyTimeout)
	sumErrors(run, ready)
	if err != nil {
		return w, nil, err
	}
	if err := gs.Send(wire.CmdStart); err != nil {
		return w, nil, err
	}
	w.begin(px.PID())
	select {
	case <-ctx.Done():
		return w, nil, ctx.Err()
	case <-time.After(win):
	}
	w.end(px.PID())
	if err := gs.Send(wire.CmdStop); err != nil {
		return w, nil, err
	}
	res, err := allWithin(ctx, gs, wire.EventResult, time.Minute)
	sumErrors(run, res)
	return w, res, err
}

// connect measures the CPU cost of connection establishment.
func (r *runner) connect(ctx context.Context, px *proc.Proc, run *Run, resume bool) error {
	gs, err := r.startGens(stats.Split(r.opt.connProcs*r.opt.connWork, r.opt.connProcs), "connect", func(n int) []string {
		return []string{"-workers", strconv.Itoa(n), "-resume=" + strconv.FormatBool(resume), "-dial-concurrency", "32"}
	})
	if err != nil {
		return err
	}
	defer gs.Finish(genQuit)
	w, res, err := measureWindow(ctx, gs, px, run, r.opt.connWindow)
	if err != nil {
		return err
	}
	var ops, resumed uint64
	var hist stats.Histogram
	for _, e := range res {
		ops += e.Ops
		resumed += e.Resumed
		hist.Merge(e.Latency)
	}
	r.record(run, &w, ops, "upgrade")
	run.Metrics["resumed_frac"] = stats.PerOp(float64(resumed), ops)
	run.Metrics["p50_ms"] = float64(hist.Quantile(0.5)) / 1e6
	run.Metrics["p99_ms"] = float64(hist.Quantile(0.99)) / 1e6
	if resume && (ops == 0 || float64(resumed) < 0.99*float64(ops)) {
		return fmt.Errorf("only %d of %d connections resumed their TLS session", resumed, ops)
	}
	if !resume && resumed > 0 {
		return fmt.Errorf("%d of %d connections resumed although no ticket cache was set", resumed, ops)
	}
	if math.IsNaN(run.Metrics["cpu_us_per_upgrade"]) {
		return errors.New("no connection completed in the window")
	}
	return nil
}

// backendArgv is the command line of one echo backend; the backends
// accept permessage-deflate when the generators offer it.
func (r *runner) backendArgv(addr, id string) []string {
	argv := []string{r.opt.backendBin, "-listen", addr, "-id", id}
	if r.opt.client == "gorilla-deflate" {
		argv = append(argv, "-deflate")
	}
	return argv
}

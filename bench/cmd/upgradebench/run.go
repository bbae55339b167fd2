package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgelb/edge/bench/internal/proc"
	"github.com/edgelb/edge/bench/internal/procfs"
	"github.com/edgelb/edge/bench/internal/tlscert"
)

// result is everything one run measured.
type result struct {
	Repeat  int    `json:"repeat"`
	Conns   int    `json:"conns"`
	Version string `json:"version"`
	OldPID  int    `json:"old_pid"`
	NewPID  int    `json:"new_pid"`
	// UpgradeReturned is how long `edge -upgrade` took: the new process
	// serves when it returns. OldExited is how long until the old process
	// had exited, every connection moved or closed. Both in seconds from
	// the start of `edge -upgrade`.
	UpgradeReturned float64 `json:"upgrade_returned_s"`
	// NewServed is the old process's own measure of the first part, from
	// starting the new process to its being ready ("took" of its log line
	// "the new process serves; handing over"), in seconds.
	NewServed float64 `json:"new_served_s"`
	OldExited float64 `json:"old_exited_s"`
	OldExit   string  `json:"old_exit"`
	// Moved and Closed are the old process's counts (its "drained" log
	// line); Adopted the new process's ("adopted connections").
	Moved   int  `json:"moved"`
	Closed  int  `json:"closed"`
	Drained bool `json:"drained_line"`
	Adopted int  `json:"adopted"`
	// Messages counts the echoes of the live connections over the run;
	// Failures lists every live connection that saw an error or a close.
	Messages int       `json:"messages"`
	Failures []failure `json:"failures"`
	// Probes and ProbeFailures count the prober's connections over the
	// whole run, ProbesDuring those started during the upgrade window.
	Probes        int      `json:"probes"`
	ProbesDuring  int      `json:"probes_during"`
	ProbeFailures []string `json:"probe_failures"`
	ProbeBefore   latency  `json:"probe_before"`
	ProbeDuring   latency  `json:"probe_during"`
	// Before, During and After are the latency of the live connections'
	// messages by send time: the warm-up before the upgrade, from the start
	// of `edge -upgrade` to the old process's exit, and the after-window.
	Before latency `json:"before"`
	During latency `json:"during"`
	After  latency `json:"after"`
	// Settle is the upgrade window and the second after it: what the
	// new process's first moments (its heap growing by the adopted
	// connections) add.
	Settle   latency `json:"settle"`
	ExtraP99 float64 `json:"extra_p99_ms"`
	Memory   memory  `json:"memory"`
	// OldCPU is the old process's CPU time from the start of the upgrade
	// to its exit, NewCPU the new process's from its start to the old
	// one's exit: what the hand-off cost, in seconds.
	OldCPU float64 `json:"old_cpu_s"`
	NewCPU float64 `json:"new_cpu_s"`
	// OtherWarmup is the CPU that processes outside the benchmark took
	// during the warm-up, in percent of one core; HostUpgrade how busy the
	// whole host was during the upgrade, in percent of one core.
	OtherWarmup float64 `json:"other_warmup_pct"`
	HostUpgrade float64 `json:"host_upgrade_pct"`
	// HeldAfterClose is how many connections the new process still
	// counted (edge_backend_active_connections) up to 5 s after the
	// clients closed theirs (-1: not read).
	HeldAfterClose int `json:"held_after_close"`
	// Warnings are edge's log lines at warn or error during the run.
	Warnings []string `json:"warnings"`
	Dir      string   `json:"dir"`
	// Err is why the run stopped short; the table leaves such runs out.
	Err string `json:"err,omitempty"`
}

// run is one repeat: fresh backends, a fresh edge, n connections, one
// upgrade.
func run(ctx context.Context, o *options, rep int) (*result, error) {
	dir := filepath.Join(o.dir, fmt.Sprintf("n%d-r%d", o.conns, rep))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	ip, err := netip.ParseAddr(o.ip)
	if err != nil {
		return nil, fmt.Errorf("-ip %q: %w", o.ip, err)
	}
	a := addrsOn(o.ip, 2)
	if err := portsFree(a.all()); err != nil {
		return nil, err
	}
	certPEM, _, err := tlscert.Write(dir, ip)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "edge")
	if err := install(o.edgeBin, bin); err != nil {
		return nil, err
	}
	cfg, err := renderConfig(configData{
		Dir: dir, Admin: a.Admin, Plain: a.Plain, TLS: a.TLS, Backends: a.Backends,
		DrainWindow: o.drainWindow, DrainTimeout: o.drainTimeout, UpgradeTimeout: o.upgradeTimeout,
		AccessLog: o.accessLog,
	})
	if err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, bin, "-check", "-config", cfg).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("edge -check -config %s: %w: %s", cfg, err, out)
	}

	g := proc.NewGroup()
	defer g.StopAll(5 * time.Second)
	ours := []int{os.Getpid()}
	for _, b := range a.Backends {
		p, err := g.Start(b.ID, nil, filepath.Join(dir, b.ID+".log"), nil, nil, o.backendBin, "-listen", b.Addr, "-id", b.ID)
		if err != nil {
			return nil, err
		}
		if err := proc.WaitListening(ctx, p, b.Addr, 10*time.Second); err != nil {
			return nil, err
		}
		ours = append(ours, p.PID())
	}
	logPath := filepath.Join(dir, "edge.log")
	// Both processes append to it; a log left by an earlier run in the
	// same -dir would lend this one its counts.
	if err := os.Remove(logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove the previous edge log: %w", err)
	}
	old, err := g.Start("edge", nil, logPath, nil, nil, bin, "-config", cfg)
	if err != nil {
		return nil, err
	}
	// The new process is the old one's child, in its process group; once
	// the old one exits it is this process's (a subreaper), and the group
	// kill is its last resort should the run fail half way.
	defer func() { _ = syscall.Kill(-old.PID(), syscall.SIGKILL) }()
	if err := waitReady(ctx, old, "http://"+a.Admin+"/readyz", 30*time.Second); err != nil {
		return nil, err
	}

	r := &result{Repeat: rep, Conns: o.conns, OldPID: old.PID(), Dir: dir}
	ours = append(ours, old.PID())
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	d := &dialer{
		plain:   "ws://" + a.Plain + "/",
		secure:  "wss://" + a.TLS + "/",
		tls:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}},
		srcs:    sources(ip, 8),
		timeout: 10 * time.Second,
	}
	conns, err := connectAll(ctx, d, o.conns, o.dialConc)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)

	// Echo loops and the prober.
	t0 := time.Now()
	host0, ours0 := hostBusy(), cpuOf(ours)
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	var loops sync.WaitGroup
	for i, l := range conns {
		phase := time.Duration(i) * time.Second / time.Duration(len(conns))
		loops.Go(func() { l.run(loopCtx, t0, phase, o.msgTimeout) })
	}
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	probesc := make(chan []probe, 1)
	go func() { probesc <- prober(probeCtx, d, t0, o.probeEvery, o.msgTimeout) }()

	if err := sleep(ctx, old, o.warmup); err != nil {
		return nil, err
	}
	r.OtherWarmup = max(0, 100*((hostBusy()-host0)-(cpuOf(ours)-ours0)).Seconds()/time.Since(t0).Seconds())

	// The upgrade: a fresh copy of the binary installed at edge's path (as
	// a package would), then edge -upgrade.
	if err := install(o.edgeBin, bin); err != nil {
		return nil, err
	}
	r.Memory.OldBefore = rss(old.PID())
	oldCPU0, hostU0 := cpuOf([]int{old.PID()}), hostBusy()
	stopSampler := make(chan struct{})
	type sampled struct {
		m   memory
		pid int
	}
	samplerc := make(chan sampled, 1)
	u0 := time.Now()
	go func() {
		m, pid := sampler(old.PID(), u0, o.sampleEvery, stopSampler)
		samplerc <- sampled{m, pid}
	}()
	upCtx, cancelUp := context.WithTimeout(ctx, o.upgradeTimeout+30*time.Second)
	out, upErr := exec.CommandContext(upCtx, bin, "-upgrade", "-config", cfg).CombinedOutput()
	cancelUp()
	uRet := time.Now()
	r.UpgradeReturned = uRet.Sub(u0).Seconds()
	if upErr != nil {
		close(stopSampler)
		return r, fmt.Errorf("edge -upgrade: %w: %s", upErr, out)
	}
	r.NewPID, r.Version = parseUpgrade(string(out))
	select {
	case <-old.Done():
	case <-time.After(o.drainTimeout + 30*time.Second):
		close(stopSampler)
		return r, fmt.Errorf("the old edge (pid %d) had not exited %v after the upgrade", old.PID(), o.drainTimeout+30*time.Second)
	case <-ctx.Done():
		close(stopSampler)
		return r, ctx.Err()
	}
	uExit := time.Now()
	r.OldExited = uExit.Sub(u0).Seconds()
	r.HostUpgrade = 100 * (hostBusy() - hostU0).Seconds() / uExit.Sub(u0).Seconds()
	r.OldCPU = (old.CPU() - oldCPU0).Seconds()
	if r.NewPID != 0 {
		r.NewCPU = cpuOf([]int{r.NewPID}).Seconds()
	}
	r.OldExit = "0"
	if err := old.Err(); err != nil {
		r.OldExit = err.Error()
	}
	if err := sleepCtx(ctx, o.after); err != nil {
		close(stopSampler)
		return r, err
	}
	close(stopSampler)
	s := <-samplerc
	r.Memory.OldPeak, r.Memory.NewPeak, r.Memory.SumPeak, r.Memory.SumPeakAt, r.Memory.Samples =
		s.m.OldPeak, s.m.NewPeak, s.m.SumPeak, s.m.SumPeakAt, s.m.Samples
	if r.NewPID == 0 {
		r.NewPID = s.pid
	}
	if r.NewPID != 0 {
		r.Memory.NewAfter = rss(r.NewPID)
	}
	if err := r.readLog(logPath); err != nil {
		return r, err
	}

	stopProbes()
	probes := <-probesc
	stopLoops()
	loops.Wait()
	closeAll(conns)
	r.HeldAfterClose = waitActive("http://"+a.Admin+"/metrics", 5*time.Second)
	stopNew(r.NewPID, old.PID())

	r.tally(conns, probes, window{From: u0.Sub(t0), To: uExit.Sub(t0)}, o)
	return r, nil
}

// tally sums the connections' and the prober's figures around up, the
// upgrade window.
func (r *result) tally(conns []*live, probes []probe, up window, o *options) {
	var all []sample
	for _, l := range conns {
		all = append(all, l.samples...)
		if l.fail != nil {
			r.Failures = append(r.Failures, *l.fail)
		}
	}
	r.Messages = len(all)
	r.Before = summarize(all, window{From: up.From - o.warmup, To: up.From})
	r.During = summarize(all, up)
	r.After = summarize(all, window{From: up.To, To: up.To + o.after})
	r.Settle = summarize(all, window{From: up.From, To: up.To + time.Second})
	r.ExtraP99 = r.During.P99 - r.Before.P99

	var ps []sample
	for _, p := range probes {
		r.Probes++
		if up.contains(p.Start) {
			r.ProbesDuring++
		}
		if p.Err != nil {
			r.ProbeFailures = append(r.ProbeFailures, fmt.Sprintf("%.3fs: %v", p.Start.Seconds(), p.Err))
			continue
		}
		ps = append(ps, sample{Sent: p.Start, RTT: p.Took})
	}
	r.ProbeBefore = summarize(ps, window{From: up.From - o.warmup, To: up.From})
	r.ProbeDuring = summarize(ps, up)
}

// waitActive polls the sum of edge_backend_active_connections at url until
// it is 0 or timeout has passed, and returns the last sum (-1 when none
// could be read).
func waitActive(url string, timeout time.Duration) int {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	last := -1
	for {
		if resp, err := hc.Get(url); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			last = sumMetric(string(b), "edge_backend_active_connections")
		}
		if last == 0 || time.Now().After(deadline) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sumMetric sums the samples of the metric name in a Prometheus text
// exposition.
func sumMetric(text, name string) int {
	sum := 0.0
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return int(sum)
}

// cpuOf is the CPU time of pids, those still running.
func cpuOf(pids []int) time.Duration {
	var d time.Duration
	for _, p := range pids {
		if s, err := procfs.ReadProcStat(p); err == nil {
			d += s.CPU()
		}
	}
	return d
}

// hostBusy is the busy time of every core of the host so far.
func hostBusy() time.Duration {
	cs, err := procfs.ReadCPUStat()
	if err != nil {
		return 0
	}
	var busy uint64
	for _, c := range cs {
		busy += c.Busy
	}
	return time.Duration(busy) * procfs.ClockTick
}

// install copies src to dst the way a package upgrade does: written beside
// it, then renamed over it, so a running process keeps its own file.
func install(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read edge binary: %w", err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return fmt.Errorf("install edge: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("install edge: %w", err)
	}
	return nil
}

// waitReady polls url until it answers 200, failing early when p exits.
func waitReady(ctx context.Context, p *proc.Proc, url string, timeout time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.Exited() {
			return fmt.Errorf("%s exited before %s answered 200: %v", p.Name, url, p.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %v", p.Name, url, timeout)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleep waits d, failing early should p exit.
func sleep(ctx context.Context, p *proc.Proc, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-p.Done():
		return fmt.Errorf("%s exited during the warm-up: %v", p.Name, p.Err())
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sources are the n client source addresses after ip (127.0.14.2 and up
// for 127.0.14.1).
func sources(ip netip.Addr, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	a := ip
	for i := range out {
		a = a.Next()
		out[i] = a
	}
	return out
}

var upgradedRe = regexp.MustCompile(`pid (\d+) now serves \(version ([^)]*)\)`)

// parseUpgrade reads the new pid and version from what edge -upgrade
// printed ("edge: upgraded to BIN: pid N now serves (version V); ...").
func parseUpgrade(out string) (pid int, version string) {
	m := upgradedRe.FindStringSubmatch(out)
	if m == nil {
		return 0, ""
	}
	pid, _ = strconv.Atoi(m[1])
	return pid, m[2]
}

// readLog takes the hand-off's counts from edge's log (both processes
// write to it): the old process's "drained" line with moved and closed,
// the new one's "adopted connections", and every warn or error line.
func (r *result) readLog(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read edge log: %w", err)
	}
	r.parseLog(b)
	return nil
}

// parseLog is readLog on the log's contents.
func (r *result) parseLog(b []byte) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Level       string `json:"level"`
			Msg         string `json:"msg"`
			Moved       *int   `json:"moved"`
			Closed      *int   `json:"closed"`
			Connections *int   `json:"connections"`
			Took        string `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch {
		case l.Msg == "drained" && l.Moved != nil && l.Closed != nil:
			r.Drained, r.Moved, r.Closed = true, *l.Moved, *l.Closed
		case l.Msg == "adopted connections from the old process" && l.Connections != nil:
			r.Adopted = *l.Connections
		case l.Msg == "upgrade: the new process serves; handing over":
			if d, err := time.ParseDuration(l.Took); err == nil {
				r.NewServed = d.Seconds()
			}
		}
		if l.Level == "WARN" || l.Level == "ERROR" {
			r.Warnings = append(r.Warnings, sc.Text())
		}
	}
}

// stopNew stops the new edge (SIGTERM, SIGKILL to the process group after
// ten seconds) and reaps it: this process is its subreaper once the old one
// has exited.
func stopNew(pid, group int) {
	if pid == 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if gone(pid, 10*time.Second) {
		return
	}
	_ = syscall.Kill(-group, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	gone(pid, 5*time.Second)
}

// gone waits until pid has exited, reaping it when it is a child.
func gone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if got == pid || errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return true
		}
		if err != nil && !errors.Is(err, syscall.ECHILD) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

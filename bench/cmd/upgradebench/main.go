// Command upgradebench measures an upgrade of edge with live connections
// (bench/README.md, "Upgrading with live connections"): for every repeat
// it starts two echo backends and an edge with a plain and a TLS 1.3
// listener, opens -conns WebSockets through it (half ws, half wss), each
// echoing a 100-byte message a second, and a prober that opens a new
// connection every 20 ms; after the warm-up it runs `edge -upgrade` and
// measures how long the new process takes to serve and the old one to
// exit, what moved and what closed, every error any connection or probe
// saw, the messages' latency during the upgrade against the warm-up, and
// the memory of both processes, read from /proc every 20 ms.
//
// It prints a markdown table, writes every figure with -json, and with
// -report only renders the table from earlier JSON files.
//
// Everything runs on loopback, on -ip (127.0.14.1) and the client source
// addresses after it; the backends run in processes of their own and the
// clients in this one, so that no process needs more than the
// 20,000-descriptor limit at 9,000 connections.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/edgelb/edge/bench/internal/procfs"
)

// options are the command-line settings.
type options struct {
	edgeBin        string
	backendBin     string
	conns          int
	repeats        int
	ip             string
	dir            string
	warmup         time.Duration
	after          time.Duration
	probeEvery     time.Duration
	sampleEvery    time.Duration
	msgTimeout     time.Duration
	drainWindow    time.Duration
	drainTimeout   time.Duration
	upgradeTimeout time.Duration
	dialConc       int
	accessLog      bool
	jsonPath       string
	report         string
}

// report is what -json writes and -report reads.
type report struct {
	Date    string         `json:"date"`
	Machine procfs.Machine `json:"machine"`
	Command string         `json:"command"`
	Runs    []*result      `json:"runs"`
	// Errors are the runs that failed before they measured anything.
	Errors []string `json:"errors"`
}

func main() {
	o := &options{}
	flag.StringVar(&o.edgeBin, "edge", "out/bin/edge", "edge binary to measure (copied into the run directory and started from there, so -upgrade re-executes the copy)")
	flag.StringVar(&o.backendBin, "backend", "out/bin/edge-backend", "echo backend binary (cmd/edge-backend)")
	flag.IntVar(&o.conns, "conns", 1000, "live WebSockets, half ws and half wss")
	flag.IntVar(&o.repeats, "repeats", 1, "runs, each with fresh backends and a fresh edge")
	flag.StringVar(&o.ip, "ip", "127.0.14.1", "loopback address of edge and the backends; clients bind the 8 addresses after it")
	flag.StringVar(&o.dir, "dir", "", "directory for configurations and logs (default: a new one under $TMPDIR)")
	flag.DurationVar(&o.warmup, "warmup", 10*time.Second, "echoing before the upgrade; also the latency baseline window")
	flag.DurationVar(&o.after, "after", 5*time.Second, "echoing after the old process exited")
	flag.DurationVar(&o.probeEvery, "probe", 20*time.Millisecond, "interval between the prober's connections")
	flag.DurationVar(&o.sampleEvery, "sample", 20*time.Millisecond, "interval between RSS samples during the upgrade")
	flag.DurationVar(&o.msgTimeout, "msg-timeout", 10*time.Second, "a message or probe not answered in this time fails")
	flag.DurationVar(&o.drainWindow, "drain-window", 5*time.Second, "edge's drain.window")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 60*time.Second, "edge's drain.timeout")
	flag.DurationVar(&o.upgradeTimeout, "upgrade-timeout", 60*time.Second, "edge's upgrade.timeout")
	flag.BoolVar(&o.accessLog, "access-log", false, "turn edge's access log on (to see what happened to a closed connection; off for the figures)")
	flag.IntVar(&o.dialConc, "dial-conc", 64, "connections opened at a time")
	flag.StringVar(&o.jsonPath, "json", "", "write every figure to this file")
	flag.StringVar(&o.report, "report", "", "only render the markdown of these JSON files (comma-separated)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if o.report != "" {
		if err := rerender(o.report); err != nil {
			log.Error("report", "err", err)
			os.Exit(1)
		}
		return
	}
	if err := benchmark(o, log); err != nil {
		log.Error("upgradebench", "err", err)
		os.Exit(1)
	}
}

// benchmark runs every repeat and prints the table.
func benchmark(o *options, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// PR_SET_CHILD_SUBREAPER: the new edge, the old one's child, becomes
	// this process's when the old one exits, so that it can be reaped.
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, 36, 1, 0); e != 0 {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", e)
	}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "upgradebench-")
		if err != nil {
			return fmt.Errorf("run directory: %w", err)
		}
		o.dir = d
	}
	for _, p := range []*string{&o.edgeBin, &o.backendBin} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("%s: %w", *p, err)
		}
		*p = abs
	}
	rep := &report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: procfs.ReadMachine(),
		Command: strings.Join(os.Args, " "),
	}
	var failed error
	for i := 1; i <= o.repeats; i++ {
		log.Info("run", "conns", o.conns, "repeat", i, "dir", o.dir)
		r, err := run(ctx, o, i)
		if r != nil {
			rep.Runs = append(rep.Runs, r)
			log.Info("upgraded", "returned_s", r.UpgradeReturned, "old_exited_s", r.OldExited, "moved", r.Moved,
				"closed", r.Closed, "failures", len(r.Failures), "probe_failures", len(r.ProbeFailures),
				"p99_before_ms", r.Before.P99, "p99_during_ms", r.During.P99, "sum_peak_mib", mib(r.Memory.SumPeak))
		}
		if err != nil {
			log.Error("run failed", "repeat", i, "err", err)
			if r != nil {
				r.Err = err.Error()
			}
			rep.Errors = append(rep.Errors, fmt.Sprintf("repeat %d: %v", i, err))
			failed = err
			if ctx.Err() != nil {
				break
			}
		}
	}
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if err := os.WriteFile(o.jsonPath, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", o.jsonPath, err)
		}
	}
	fmt.Print(render([]*report{rep}))
	return failed
}

// rerender prints the table of earlier -json files.
func rerender(paths string) error {
	var reps []*report
	for p := range strings.SplitSeq(paths, ",") {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		reps = append(reps, &r)
	}
	fmt.Print(render(reps))
	return nil
}

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/edgelb/edge/bench/internal/stats"
)

// row is one line of the table: a label and the figure of a run.
type row struct {
	label  string
	format string
	value  func(r *result) float64
}

var rows = []row{
	{"`edge -upgrade` returned (new process serves), s", "%.2f", func(r *result) float64 { return r.UpgradeReturned }},
	{"new process started and ready (old process's log), s", "%.3f", func(r *result) float64 { return r.NewServed }},
	{"old process exited (all moved or closed), s", "%.2f", func(r *result) float64 { return r.OldExited }},
	{"moved by the old process", "%.0f", func(r *result) float64 { return float64(r.Moved) }},
	{"adopted by the new process", "%.0f", func(r *result) float64 { return float64(r.Adopted) }},
	{"closed by the old process (1012)", "%.0f", func(r *result) float64 { return float64(r.Closed) }},
	{"live connections with an error or a close", "%.0f", func(r *result) float64 { return float64(len(r.Failures)) }},
	{"connections the new process held 5 s after the clients closed", "%.0f", func(r *result) float64 { return float64(r.HeldAfterClose) }},
	{"probes opened during the upgrade", "%.0f", func(r *result) float64 { return float64(r.ProbesDuring) }},
	{"probes failed (whole run)", "%.0f", func(r *result) float64 { return float64(len(r.ProbeFailures)) }},
	{"echo p50 before, ms", "%.2f", func(r *result) float64 { return r.Before.P50 }},
	{"echo p50 during, ms", "%.2f", func(r *result) float64 { return r.During.P50 }},
	{"echo p99 before, ms", "%.2f", func(r *result) float64 { return r.Before.P99 }},
	{"echo p99 during, ms", "%.2f", func(r *result) float64 { return r.During.P99 }},
	{"**extra p99 during the upgrade, ms**", "%.2f", func(r *result) float64 { return r.ExtraP99 }},
	{"echo max before, ms", "%.1f", func(r *result) float64 { return r.Before.Max }},
	{"echo max during, ms", "%.1f", func(r *result) float64 { return r.During.Max }},
	{"echo p99 upgrade + 1 s, ms", "%.2f", func(r *result) float64 { return r.Settle.P99 }},
	{"echo max upgrade + 1 s, ms", "%.1f", func(r *result) float64 { return r.Settle.Max }},
	{"echo p99 after, ms", "%.2f", func(r *result) float64 { return r.After.P99 }},
	{"messages sent during the upgrade", "%.0f", func(r *result) float64 { return float64(r.During.N) }},
	{"messages sent during the upgrade + 1 s", "%.0f", func(r *result) float64 { return float64(r.Settle.N) }},
	{"probe (connect + upgrade + echo) max before, ms", "%.1f", func(r *result) float64 { return r.ProbeBefore.Max }},
	{"probe max during, ms", "%.1f", func(r *result) float64 { return r.ProbeDuring.Max }},
	{"CPU of the old process, start of the upgrade to its exit, s", "%.3f", func(r *result) float64 { return r.OldCPU }},
	{"CPU of the new process, its start to the old one's exit, s", "%.3f", func(r *result) float64 { return r.NewCPU }},
	{"CPU outside the benchmark during the warm-up, % of one core", "%.0f", func(r *result) float64 { return r.OtherWarmup }},
	{"RSS old process before, MiB", "%.1f", func(r *result) float64 { return mib(r.Memory.OldBefore) }},
	{"RSS old process peak, MiB", "%.1f", func(r *result) float64 { return mib(r.Memory.OldPeak) }},
	{"RSS new process peak, MiB", "%.1f", func(r *result) float64 { return mib(r.Memory.NewPeak) }},
	{"**RSS old + new peak, MiB**", "%.1f", func(r *result) float64 { return mib(r.Memory.SumPeak) }},
	{"RSS new process after, MiB", "%.1f", func(r *result) float64 { return mib(r.Memory.NewAfter) }},
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// render is the markdown table of every complete run of reps, a column per
// connection count, each cell the median and (min–max) over the runs.
func render(reps []*report) string {
	byConns := map[int][]*result{}
	var errs []string
	for _, rep := range reps {
		for _, r := range rep.Runs {
			if r.Err == "" {
				byConns[r.Conns] = append(byConns[r.Conns], r)
			}
		}
		errs = append(errs, rep.Errors...)
	}
	var counts []int
	for n := range byConns {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	var b strings.Builder
	for _, rep := range reps {
		m := rep.Machine
		fmt.Fprintf(&b, "- %s: `%s`; %d × %s, %.0f GiB, Linux %s, fd limit %s; edge %s\n", rep.Date, rep.Command,
			m.NProc, m.Model, float64(m.MemoryKB)/(1<<20), m.Kernel, m.FDLimit, versions(rep))
	}
	b.WriteString("\n| |")
	for _, n := range counts {
		fmt.Fprintf(&b, " %d connections (%d ws + %d wss), %d runs |", n, n-n/2, n/2, len(byConns[n]))
	}
	b.WriteString("\n|---|")
	for range counts {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, rw := range rows {
		fmt.Fprintf(&b, "| %s |", rw.label)
		for _, n := range counts {
			vs := make([]float64, 0, len(byConns[n]))
			for _, r := range byConns[n] {
				vs = append(vs, rw.value(r))
			}
			fmt.Fprintf(&b, " %s |", cell(rw.format, stats.Summarize(vs)))
		}
		b.WriteString("\n")
	}
	for _, e := range errs {
		fmt.Fprintf(&b, "\nFailed: %s\n", e)
	}
	for _, n := range counts {
		for _, r := range byConns[n] {
			writeFailures(&b, r)
		}
	}
	return b.String()
}

// versions lists the edge versions of rep's runs, once each.
func versions(rep *report) string {
	var vs []string
	for _, r := range rep.Runs {
		if r.Version != "" && !slices.Contains(vs, r.Version) {
			vs = append(vs, r.Version)
		}
	}
	if len(vs) == 0 {
		return "(unknown)"
	}
	return strings.Join(vs, ", ")
}

// cell is a summary as "median (min–max)", or the one value when all runs
// agree.
func cell(format string, s stats.Summary) string {
	if s.N == 0 {
		return "–"
	}
	med := fmt.Sprintf(format, s.Median)
	lo, hi := fmt.Sprintf(format, s.Min), fmt.Sprintf(format, s.Max)
	if s.N == 1 || lo == hi {
		return med
	}
	return fmt.Sprintf("%s (%s–%s)", med, lo, hi)
}

// writeFailures lists what a run's connections and probes saw, the first
// few of each: every one of them is a connection the upgrade broke.
func writeFailures(b *strings.Builder, r *result) {
	const show = 5
	if r.OldExit != "" && r.OldExit != "0" {
		fmt.Fprintf(b, "\n%d connections, repeat %d: the old process exited with %s\n", r.Conns, r.Repeat, r.OldExit)
	}
	if r.Drained && r.Adopted != r.Moved {
		fmt.Fprintf(b, "\n%d connections, repeat %d: %d moved, but the new process adopted %d\n", r.Conns, r.Repeat, r.Moved, r.Adopted)
	}
	if len(r.Failures) > 0 {
		fmt.Fprintf(b, "\n%d connections, repeat %d: %d live connections failed:\n", r.Conns, r.Repeat, len(r.Failures))
		for _, f := range r.Failures[:min(show, len(r.Failures))] {
			fmt.Fprintf(b, "- %s at %.3f s: %s\n", f.Conn, f.At.Seconds(), f.Err)
		}
	}
	if len(r.ProbeFailures) > 0 {
		fmt.Fprintf(b, "\n%d connections, repeat %d: %d probes failed:\n", r.Conns, r.Repeat, len(r.ProbeFailures))
		for _, f := range r.ProbeFailures[:min(show, len(r.ProbeFailures))] {
			fmt.Fprintf(b, "- %s\n", f)
		}
	}
}

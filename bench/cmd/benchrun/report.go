package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/edgelb/edge/bench/internal/stats"
)

// metricRow is one line of the report table.
type metricRow struct {
	phase, key, label string
	// lowerBetter tells the reader which way the ratio should go.
	lowerBetter bool
	digits      int
}

var reportRows = []metricRow{
	{"idle", "kib_per_conn", "RSS per idle wss connection, after one echo each (KiB)", true, 1},
	{"idle", "kib_per_conn_settled", "RSS per idle wss connection, after the settle delay (KiB)", true, 1},
	{"idle", "conns", "connections held", false, 0},
	{"idle", "fds_per_conn", "proxy descriptors per connection", true, 2},
	{"idle", "cpu_us_per_conn", "CPU per connection set up (full handshake, upgrade, echo) (µs)", true, 0},
	{"idle", "idle_proxy_cpu_pct", "proxy CPU while holding them idle (%)", true, 2},
	{"idle-16k", "kib_per_conn", "RSS per idle wss connection, after one 16 KiB message each (KiB)", true, 1},
	{"idle-16k", "kib_per_conn_settled", "same, after the settle delay (KiB)", true, 1},
	{"idle-16k", "conns", "connections held (16 KiB phase)", false, 0},
	{"idle-16k", "cpu_us_per_conn", "CPU per connection set up and echoing 16 KiB (µs)", true, 0},
	{"idle-1m", "kib_per_conn", "RSS per idle wss connection, after one 1 MiB message each (KiB)", true, 1},
	{"idle-1m", "kib_per_conn_settled", "same, after the settle delay (KiB)", true, 1},
	{"idle-1m", "conns", "connections held (1 MiB phase)", false, 0},
	{"idle-1m", "cpu_us_per_conn", "CPU per connection set up and echoing 1 MiB (µs)", true, 0},
	{"echo", "cpu_us_per_msg", "**closed-loop echo: proxy CPU per message (µs)**", true, 2},
	{"echo", "msgs_per_s", "closed-loop echo: messages/s", false, 0},
	{"echo", "proxy_cpu_pct", "closed-loop echo: proxy CPU (% of one core)", false, 0},
	{"rate", "p50_us", "fixed-rate echo: p50 latency (µs)", true, 0},
	{"rate", "p99_us", "fixed-rate echo: p99 latency (µs)", true, 0},
	{"rate", "p999_us", "fixed-rate echo: p99.9 latency (µs)", true, 0},
	{"rate", "cpu_us_per_msg", "fixed-rate echo: proxy CPU per message (µs)", true, 2},
	{"rate", "rate_kept", "fixed-rate echo: fraction of the offered rate sent", false, 3},
	{"connect-full", "cpu_us_per_upgrade", "**full TLS 1.3 handshake + upgrade: proxy CPU (µs)**", true, 0},
	{"connect-full", "upgrades_per_s", "full handshake + upgrade: per second", false, 0},
	{"connect-full", "resumed_frac", "full handshake: fraction resumed (must be 0)", true, 2},
	{"connect-resume", "cpu_us_per_upgrade", "**resumed TLS 1.3 handshake + upgrade: proxy CPU (µs)**", true, 0},
	{"connect-resume", "upgrades_per_s", "resumed handshake + upgrade: per second", false, 0},
	{"connect-resume", "resumed_frac", "resumed handshake: fraction resumed (DidResume)", false, 3},
}

var proxyOrder = []string{"edge", "haproxy", "nginx"}

var proxyTitle = map[string]string{"edge": "edge", edgeFrames: "edge frame-aware", "haproxy": "HAProxy", "nginx": "nginx"}

// frameOverheadLimit is the target of the frame-aware overhead figure:
// frame-aware mode costs at most 10% more edge CPU per echoed message than
// opaque mode.
const frameOverheadLimit = 1.10

// FrameOverhead is edge's CPU per echoed message in frame-aware mode over
// the same in opaque mode, from the closed-loop echo phases of one or more
// runs.
type FrameOverhead struct {
	// Opaque and FrameAware summarize cpu_us_per_msg of edge and
	// edge-frames over the repeats.
	Opaque     stats.Summary `json:"opaque_cpu_us_per_msg"`
	FrameAware stats.Summary `json:"frame_aware_cpu_us_per_msg"`
	// Ratio is FrameAware.Median / Opaque.Median.
	Ratio float64 `json:"ratio"`
	// PerRepeat summarizes the ratio within each repeat, whose two runs
	// went back to back on the same host: its range is the figure's spread.
	PerRepeat stats.Summary `json:"per_repeat_ratio"`
	// Limit is the target for Ratio, and Met whether Ratio is within it.
	Limit float64 `json:"limit"`
	Met   bool    `json:"met"`
}

// frameOverhead computes the figure, or returns nil when the results lack
// an echo phase of either edge mode.
func frameOverhead(results []Result) *FrameOverhead {
	type key struct{ file, repeat int }
	opaque, framed := map[key]float64{}, map[key]float64{}
	var ov, fv []float64
	for i, res := range results {
		for _, run := range res.Runs {
			v, ok := run.Metrics["cpu_us_per_msg"]
			if run.Phase != "echo" || !ok {
				continue
			}
			switch run.Proxy {
			case "edge":
				opaque[key{i, run.Repeat}] = v
				ov = append(ov, v)
			case edgeFrames:
				framed[key{i, run.Repeat}] = v
				fv = append(fv, v)
			}
		}
	}
	fo := &FrameOverhead{Opaque: stats.Summarize(ov), FrameAware: stats.Summarize(fv), Limit: frameOverheadLimit}
	if fo.Opaque.N == 0 || fo.FrameAware.N == 0 || fo.Opaque.Median == 0 {
		return nil
	}
	fo.Ratio = fo.FrameAware.Median / fo.Opaque.Median
	fo.Met = fo.Ratio <= fo.Limit
	var per []float64
	for k, f := range framed {
		if o, ok := opaque[k]; ok && o > 0 {
			per = append(per, f/o)
		}
	}
	fo.PerRepeat = stats.Summarize(per)
	return fo
}

func renderFiles(paths []string, mdPath string) error {
	var results []Result
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read results %s: %w", p, err)
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("decode results %s: %w", p, err)
		}
		results = append(results, r)
	}
	md := render(results)
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		return fmt.Errorf("write report %s: %w", mdPath, err)
	}
	return nil
}

// summarize collects, per proxy, phase and metric, the values of every
// successful run.
func summarize(results []Result) map[string]map[string]map[string][]float64 {
	out := map[string]map[string]map[string][]float64{}
	for _, res := range results {
		for _, run := range res.Runs {
			if run.Error != "" && len(run.Metrics) == 0 {
				continue
			}
			if out[run.Proxy] == nil {
				out[run.Proxy] = map[string]map[string][]float64{}
			}
			if out[run.Proxy][run.Phase] == nil {
				out[run.Proxy][run.Phase] = map[string][]float64{}
			}
			for k, v := range run.Metrics {
				out[run.Proxy][run.Phase][k] = append(out[run.Proxy][run.Phase][k], v)
			}
		}
	}
	return out
}

func formatNum(v float64, digits int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return strings.ReplaceAll(fmt.Sprintf("%.*f", digits, v), "-", "−")
}

// cell renders the median of a metric and, over several runs, its range.
func cell(s stats.Summary, digits int) string {
	if s.N == 0 {
		return "—"
	}
	if s.N == 1 {
		return formatNum(s.Median, digits)
	}
	return fmt.Sprintf("%s (%s–%s)", formatNum(s.Median, digits), formatNum(s.Min, digits), formatNum(s.Max, digits))
}

func ratio(a, b stats.Summary) string {
	if a.N == 0 || b.N == 0 || b.Median == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a.Median/b.Median)
}

// render builds docs/BENCHMARKS.md from one or more result files.
func render(results []Result) string {
	var b strings.Builder
	sum := summarize(results)
	last := results[len(results)-1]
	var present []string
	for _, p := range proxyOrder {
		if _, ok := sum[p]; ok {
			present = append(present, p)
		}
	}
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("# Benchmarks\n\n")
	w("edge against HAProxy and nginx on the same machine, same TLS, same backends, same placement. ")
	w("Generated by `bench/cmd/benchrun` from `bench/out/*.json`; see `bench/README.md` for the method. ")
	w("Lower is better unless the row says messages/s, per second or a fraction.\n\n")
	w("- **Date:** %s (UTC)\n", last.Finished.Format("2006-01-02 15:04"))
	w("- **Machine:** %d × %s, %.0f GiB, Linux %s, fd limit %s per process\n", last.Machine.NProc, last.Machine.Model,
		float64(last.Machine.MemoryKB)/(1<<20), last.Machine.Kernel, last.Machine.FDLimit)
	vkeys := sortedKeys(last.Versions)
	var vs []string
	for _, k := range vkeys {
		vs = append(vs, fmt.Sprintf("%s: %s", k, last.Versions[k]))
	}
	w("- **Versions:** %s\n", strings.Join(vs, "; "))
	for _, res := range results {
		mode := ""
		if res.Quick {
			mode = " (quick mode)"
		}
		w("- **Command%s:** `%s`\n", mode, res.Command)
	}
	repeats := 0
	for _, res := range results {
		for _, run := range res.Runs {
			repeats = max(repeats, run.Repeat)
		}
	}
	w("- **Client:** %s\n", clientLine(results))
	w("- **Repeats:** %d per phase and proxy, the order of the proxies rotated every repeat; cells are the median with (min–max) over the repeats, ratios are of medians.\n\n", repeats)

	w("| metric |")
	for _, p := range present {
		w(" %s |", proxyTitle[p])
	}
	anchors := []string{}
	if slices.Contains(present, "edge") {
		for _, p := range present {
			if p != "edge" {
				anchors = append(anchors, p)
				w(" edge / %s |", proxyTitle[p])
			}
		}
	}
	w("\n|---|")
	for range len(present) + len(anchors) {
		w("---:|")
	}
	w("\n")
	for _, row := range reportRows {
		cells := map[string]stats.Summary{}
		found := false
		for _, p := range present {
			cells[p] = stats.Summarize(sum[p][row.phase][row.key])
			found = found || cells[p].N > 0
		}
		if !found {
			continue
		}
		w("| %s |", row.label)
		for _, p := range present {
			w(" %s |", cell(cells[p], row.digits))
		}
		for _, a := range anchors {
			w(" %s |", ratio(cells["edge"], cells[a]))
		}
		w("\n")
	}

	renderFrameOverhead(w, results, sum)
	renderCPURatios(w, results)
	renderTargets(w, results, sum)

	w("\n## Which core saturated\n\n")
	w("Busy share of the proxy's core and of the load core (generators and backends) over each measured window, median over repeats. ")
	w("\"Not the proxy's\" is the proxy core's busy time beyond the proxy's own CPU (other processes on its core, softirq time not charged to it). \"Other\" is CPU that processes outside the benchmark took on the two cores (percent of one core): the host is shared, so it is measured and shown rather than assumed zero. A core at 95%% or more is saturated; when only the load core is, the proxy's throughput figure is a floor and its CPU per operation is the figure to compare.\n\n")
	w("| phase |")
	for _, p := range present {
		w(" %s |", proxyTitle[p])
	}
	w("\n|---|")
	for range present {
		w("---|")
	}
	w("\n")
	for _, ph := range allPhases {
		has := false
		for _, p := range present {
			if len(sum[p][ph]["proxy_core_busy_pct"]) > 0 {
				has = true
			}
		}
		if !has {
			continue
		}
		w("| %s |", ph)
		for _, p := range present {
			pc := stats.Summarize(sum[p][ph]["proxy_core_busy_pct"])
			lc := stats.Summarize(sum[p][ph]["load_core_busy_pct"])
			if pc.N == 0 {
				w(" — |")
				continue
			}
			fc := stats.Summarize(sum[p][ph]["foreign_cpu_pct"])
			others := ""
			if oc := stats.Summarize(sum[p][ph]["proxy_core_others_pct"]); oc.N > 0 {
				others = fmt.Sprintf(" (not the proxy's: %.0f%%)", oc.Median)
			}
			w(" proxy %.0f%%%s, load %.0f%%, other %.0f%%: %s |", pc.Median, others, lc.Median, fc.Median, saturatedLabels(results, p, ph))
		}
		w("\n")
	}

	w("\n## Reading these figures\n\n")
	w("- Memory per connection does not depend on the host's load and is the most stable figure.\n")
	w("- CPU per operation is the proxy's own utime+stime divided by the operations in the window. It rises when other processes share the proxy's core ")
	w("(context switches, cache pollution, fewer events per wake-up), so compare columns within one run and read the \"other\" figures above.\n")
	w("- Throughput and latency tails also depend on the load core, which the generators share with the backends (and, on a shared host, with other work); ")
	w("latency is measured from each message's scheduled send time, so a starved generator shows up as a tail too.\n")

	w("\n## Settings\n\n")
	for _, k := range sortedKeys(last.Settings) {
		w("- %s: %s\n", k, last.Settings[k])
	}
	var problems []string
	for _, res := range results {
		for _, run := range res.Runs {
			if run.Error != "" || run.Errors > 0 {
				problems = append(problems, fmt.Sprintf("- %s %s repeat %d: %d generator errors; %s", run.Proxy, run.Phase, run.Repeat, run.Errors, run.Error))
			}
		}
	}
	if len(problems) > 0 {
		w("\n## Problems during the runs\n\n%s\n", strings.Join(problems, "\n"))
	}
	return b.String()
}

// renderFrameOverhead writes the frame-aware overhead table and the
// targets when edge-frames was measured; a failed attempt still shows, as a
// target not measured.
func renderFrameOverhead(w func(string, ...any), results []Result, sum map[string]map[string]map[string][]float64) {
	attempted := false
	for _, res := range results {
		for _, run := range res.Runs {
			attempted = attempted || run.Proxy == edgeFrames
		}
	}
	if !attempted {
		return
	}
	fo := frameOverhead(results)
	w("\n## Frame-aware overhead\n\n")
	w("edge with frame-aware splicing on (`websocket: { max_frame_bytes: %d, ping_interval: %s, ping_timeout: %s }` on its pool) ",
		frameAware.MaxFrameBytes, frameAware.PingInterval, frameAware.PingTimeout)
	w("against edge in its default opaque mode, in the closed-loop echo phase above: same load, same run, the two modes back to back in every repeat. ")
	w("The ratio of CPU per message is of the medians, with the (min–max) of the ratios within each repeat.\n\n")
	w("| closed-loop echo | edge opaque | edge frame-aware | frame-aware / opaque |\n|---|---:|---:|---:|\n")
	for _, row := range reportRows {
		if row.phase != "echo" {
			continue
		}
		o := stats.Summarize(sum["edge"]["echo"][row.key])
		f := stats.Summarize(sum[edgeFrames]["echo"][row.key])
		if o.N == 0 && f.N == 0 {
			continue
		}
		label, _ := strings.CutPrefix(strings.Trim(row.label, "*"), "closed-loop echo: ")
		r := ratio(f, o)
		if row.key == "cpu_us_per_msg" {
			label = "**" + label + "**"
			r = frameRatio(fo)
		}
		w("| %s | %s | %s | %s |\n", label, cell(o, row.digits), cell(f, row.digits), r)
	}
	cores := func(p string) string {
		pc := stats.Summarize(sum[p]["echo"]["proxy_core_busy_pct"])
		if pc.N == 0 {
			return "—"
		}
		lc := stats.Summarize(sum[p]["echo"]["load_core_busy_pct"])
		fc := stats.Summarize(sum[p]["echo"]["foreign_cpu_pct"])
		return fmt.Sprintf("proxy %.0f%%, load %.0f%%, other %.0f%%: %s", pc.Median, lc.Median, fc.Median, saturatedLabels(results, p, "echo"))
	}
	w("| cores (see which core saturated) | %s | %s | |\n", cores("edge"), cores(edgeFrames))

}

// target is one of edge's goals against the anchors, a ratio of medians.
type target struct {
	label      string
	phase, key string
	// against is "haproxy", or "better" for the lower of HAProxy and nginx:
	// the ratio of edge's median to the anchor's. "repeats" is the median
	// of the per-repeat ratios to the better anchor (perRepeatRatios), and
	// "absolute" edge's median itself, in the metric's unit.
	against string
	limit   float64
	unit    string
}

var targets = []target{
	{"RSS per idle wss connection, edge / HAProxy", "idle", "kib_per_conn", "haproxy", 0.5, ""},
	{"closed-loop echo CPU-µs/msg, edge / the better of HAProxy and nginx", "echo", "cpu_us_per_msg", "better", 0.8, ""},
	{"full handshake + upgrade CPU-µs, edge / the better", "connect-full", "cpu_us_per_upgrade", "better", 0.6, ""},
	{"resumed handshake + upgrade CPU-µs, edge / the better", "connect-resume", "cpu_us_per_upgrade", "better", 0.6, ""},
	{"fixed-rate p99 latency, edge / HAProxy", "rate", "p99_us", "haproxy", 1.0, ""},
	{"RSS per idle wss connection after one tiny echo (idle)", "idle", "kib_per_conn", "absolute", 3.0, "KiB"},
	{"RSS per idle wss connection after one 16 KiB message (idle-16k)", "idle-16k", "kib_per_conn", "absolute", 3.0, "KiB"},
	{"RSS per idle wss connection after one 1 MiB message (idle-1m)", "idle-1m", "kib_per_conn", "absolute", 3.0, "KiB"},
	{"closed-loop echo CPU-µs/msg, edge / the better, median of per-repeat ratios", "echo", "cpu_us_per_msg", "repeats", 0.7, ""},
	{"full handshake + upgrade CPU-µs, edge / the better, median of per-repeat ratios", "connect-full", "cpu_us_per_upgrade", "repeats", 0.9, ""},
}

// verdict is "met" when v is within limit.
func verdict(v, limit float64) string {
	if v <= limit {
		return "met"
	}
	return "not met"
}

// specialTarget renders an "absolute" or "repeats" target, or returns ""
// when it was not measured.
func specialTarget(tg target, results []Result, sum map[string]map[string]map[string][]float64) string {
	e := stats.Summarize(sum["edge"][tg.phase][tg.key])
	if e.N == 0 {
		return ""
	}
	if tg.against == "repeats" {
		rr := perRepeatRatios(results, tg.phase, tg.key)
		if rr.ratios.N == 0 {
			return ""
		}
		return fmt.Sprintf("| %s: ≤ %.2f× | %s (%s) | **%s** |\n", tg.label, tg.limit, spread(rr.ratios), rr.betterLabel(), verdict(rr.ratios.Median, tg.limit))
	}
	// The target is edge's; the anchors' figures and verdicts show where
	// the limit stands.
	var others, verdicts []string
	for _, a := range []string{"haproxy", "nginx"} {
		s := stats.Summarize(sum[a][tg.phase][tg.key])
		if s.N > 0 {
			others = append(others, fmt.Sprintf("%s %.1f", proxyTitle[a], s.Median))
			verdicts = append(verdicts, fmt.Sprintf("%s: %s", proxyTitle[a], verdict(s.Median, tg.limit)))
		}
	}
	measured := fmt.Sprintf("edge %.1f %s", e.Median, tg.unit)
	v := "**" + verdict(e.Median, tg.limit) + "**"
	if len(others) > 0 {
		measured += " (" + strings.Join(others, ", ") + ")"
		v += " (" + strings.Join(verdicts, ", ") + ")"
	}
	return fmt.Sprintf("| %s: ≤ %.1f %s | %s | %s |\n", tg.label, tg.limit, tg.unit, measured, v)
}

// renderTargets writes edge's targets with their verdicts: the ratios to
// the anchors that were measured, and the frame-aware overhead when
// edge-frames was attempted.
func renderTargets(w func(string, ...any), results []Result, sum map[string]map[string]map[string][]float64) {
	var rows []string
	for _, tg := range targets {
		if tg.against == "absolute" || tg.against == "repeats" {
			if row := specialTarget(tg, results, sum); row != "" {
				rows = append(rows, row)
			}
			continue
		}
		e := stats.Summarize(sum["edge"][tg.phase][tg.key])
		if e.N == 0 {
			continue
		}
		var ref stats.Summary
		name := ""
		for _, a := range []string{"haproxy", "nginx"} {
			if tg.against == "haproxy" && a != "haproxy" {
				continue
			}
			s := stats.Summarize(sum[a][tg.phase][tg.key])
			if s.N > 0 && s.Median > 0 && (ref.N == 0 || s.Median < ref.Median) {
				ref, name = s, proxyTitle[a]
			}
		}
		if ref.N == 0 {
			continue
		}
		r := e.Median / ref.Median
		verdict := "not met"
		if r <= tg.limit {
			verdict = "met"
		}
		rows = append(rows, fmt.Sprintf("| %s: ≤ %.2f× | %.2f× (%s) | **%s** |\n", tg.label, tg.limit, r, name, verdict))
	}
	attempted := false
	for _, res := range results {
		for _, run := range res.Runs {
			attempted = attempted || run.Proxy == edgeFrames
		}
	}
	if attempted {
		fo := frameOverhead(results)
		verdict := "not measured (needs the echo phase of both edge and " + edgeFrames + ")"
		if fo != nil {
			verdict = "not met"
			if fo.Met {
				verdict = "met"
			}
		}
		rows = append(rows, fmt.Sprintf("| frame-aware echo CPU-µs/msg, frame-aware / opaque edge: ≤ %.2f× | %s | **%s** |\n", frameOverheadLimit, frameRatio(fo), verdict))
	}
	if len(rows) == 0 {
		return
	}
	w("\n## Targets\n\n")
	w("Ratios of the medians in the table above, or, where the target says so, the median of the per-repeat ratios with their (min–max); the anchor each ratio is taken against is named. ")
	w("The absolute memory targets are edge's; the anchors' figures and verdicts are shown beside it.\n\n")
	w("| target | measured | verdict |\n|---|---:|---|\n")
	for _, r := range rows {
		w("%s", r)
	}
	w("\n50,000 connections held by several edges sharing one port (`SO_REUSEPORT`) are measured by `bench/fleet.sh`: see [FLEET.md](FLEET.md).\n")
}

// frameRatio renders the frame-aware overhead ratio with the range of the
// per-repeat ratios. It has three decimals so that a figure just above the
// limit cannot print as the limit itself.
func frameRatio(fo *FrameOverhead) string {
	if fo == nil {
		return "—"
	}
	s := fmt.Sprintf("%.3f×", fo.Ratio)
	if fo.PerRepeat.N > 1 {
		s += fmt.Sprintf(" (%.3f–%.3f)", fo.PerRepeat.Min, fo.PerRepeat.Max)
	}
	return s
}

// saturatedLabels lists the distinct saturation verdicts of the repeats.
func saturatedLabels(results []Result, proxy, phase string) string {
	seen := map[string]int{}
	for _, res := range results {
		for _, run := range res.Runs {
			if run.Proxy == proxy && run.Phase == phase && run.Saturated != "" {
				seen[run.Saturated]++
			}
		}
	}
	keys := sortedKeys(seen)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if len(keys) == 1 {
			parts = append(parts, k)
		} else {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, seen[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/edgelb/edge/bench/internal/stats"
)

// cpuRatio is one of edge's CPU figures taken against the better anchor.
type cpuRatio struct {
	label      string
	phase, key string
}

// cpuRatios are the CPU figures whose ratio to the better of HAProxy and
// nginx the report gives per repeat: on a shared host the ratio of one
// repeat moves with the host's state, so the figure is the median of the
// per-repeat ratios with their spread.
var cpuRatios = []cpuRatio{
	{"closed-loop echo CPU-µs/msg", "echo", "cpu_us_per_msg"},
	{"full handshake + upgrade CPU-µs", "connect-full", "cpu_us_per_upgrade"},
	{"resumed handshake + upgrade CPU-µs", "connect-resume", "cpu_us_per_upgrade"},
}

// repeatRatios is, for one figure, edge's value over the better anchor's
// within each repeat in which edge and at least one anchor succeeded.
type repeatRatios struct {
	ratios stats.Summary
	// better counts which anchor was the better one, per repeat.
	better map[string]int
}

// perRepeatRatios computes repeatRatios of phase and key. Repeats are told
// apart by result file and repeat number.
func perRepeatRatios(results []Result, phase, key string) repeatRatios {
	type rk struct{ file, repeat int }
	vals := map[rk]map[string]float64{}
	for i, res := range results {
		for _, run := range res.Runs {
			v, ok := run.Metrics[key]
			if run.Phase != phase || !ok || v <= 0 || (run.Error != "" && len(run.Metrics) == 0) {
				continue
			}
			k := rk{i, run.Repeat}
			if vals[k] == nil {
				vals[k] = map[string]float64{}
			}
			vals[k][run.Proxy] = v
		}
	}
	out := repeatRatios{better: map[string]int{}}
	var rs []float64
	for _, m := range vals {
		e, ok := m["edge"]
		if !ok {
			continue
		}
		best, name := 0.0, ""
		for _, a := range []string{"haproxy", "nginx"} {
			if v, ok := m[a]; ok && (name == "" || v < best) {
				best, name = v, a
			}
		}
		if name == "" {
			continue
		}
		rs = append(rs, e/best)
		out.better[proxyTitle[name]]++
	}
	out.ratios = stats.Summarize(rs)
	return out
}

// betterLabel lists which anchor was the better one, with its count of
// repeats when that changed between repeats.
func (r repeatRatios) betterLabel() string {
	names := make([]string, 0, len(r.better))
	for n := range r.better {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 1 {
		return names[0]
	}
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", n, r.better[n]))
	}
	return strings.Join(parts, ", ")
}

// spread renders a summary of ratios as "median× (min–max)".
func spread(s stats.Summary) string {
	if s.N == 0 {
		return "—"
	}
	if s.N == 1 {
		return fmt.Sprintf("%.2f×", s.Median)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", s.Median, s.Min, s.Max)
}

// renderCPURatios writes edge's CPU figures against the better anchor, per
// repeat, when edge and an anchor were measured.
func renderCPURatios(w func(string, ...any), results []Result) {
	var rows []string
	for _, cr := range cpuRatios {
		rr := perRepeatRatios(results, cr.phase, cr.key)
		if rr.ratios.N == 0 {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s, edge / the better anchor | %s | %d | %s |\n",
			cr.label, spread(rr.ratios), rr.ratios.N, rr.betterLabel()))
	}
	if len(rows) == 0 {
		return
	}
	w("\n## CPU ratios per repeat\n\n")
	w("Within every repeat, edge's CPU per operation over the better (lower) of HAProxy's and nginx's in the same repeat; ")
	w("the proxies' order rotates every repeat. The figure is the median of these per-repeat ratios, with their (min–max): ")
	w("on a shared host a single repeat's ratio moves with the host's state, so the spread is part of the figure.\n\n")
	w("| ratio | median of per-repeat ratios (min–max) | repeats | better anchor |\n|---|---:|---:|---|\n")
	for _, r := range rows {
		w("%s", r)
	}
}

// clientLine names the generators' WebSocket client of every run, with
// how it writes messages; runs from before the choice existed used gorilla.
func clientLine(results []Result) string {
	count := map[string]int{}
	for _, res := range results {
		for _, run := range res.Runs {
			c := run.Client
			if c == "" {
				c = "gorilla"
			}
			count[c]++
		}
	}
	names := sortedKeys(count)
	if len(names) == 1 {
		return fmt.Sprintf("%s in every run (%s)", names[0], clientWrites[names[0]])
	}
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s in %d runs (%s)", n, count[n], clientWrites[n]))
	}
	return "mixed: " + strings.Join(parts, "; ") + "; the cells mix them"
}

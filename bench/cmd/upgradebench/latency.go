package main

import (
	"slices"
	"time"
)

// latency describes the round trips of the messages sent in one window.
type latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// window is a span of send times, [From, To).
type window struct{ From, To time.Duration }

// contains reports whether a message sent at t belongs to w.
func (w window) contains(t time.Duration) bool { return t >= w.From && t < w.To }

// quantile is the nearest-rank q-quantile of sorted (ascending): the
// smallest value with at least q of all values at or below it, so a p99 of
// 100 values is the 99th, and of 50 values the 50th (the maximum). It is 0
// for no values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// Rank ceil(q*n), computed in integers so that 0.99*100 is 99, not
	// 99.00000000000001 rounded up to 100.
	perMille := int64(q*1e6 + 0.5)
	rank := int((perMille*int64(n) + 1e6 - 1) / 1e6)
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

// summarize is the latency of the samples sent within w.
func summarize(samples []sample, w window) latency {
	var rtts []time.Duration
	for _, s := range samples {
		if w.contains(s.Sent) {
			rtts = append(rtts, s.RTT)
		}
	}
	slices.Sort(rtts)
	if len(rtts) == 0 {
		return latency{}
	}
	return latency{
		N:   len(rtts),
		P50: ms(quantile(rtts, 0.50)),
		P99: ms(quantile(rtts, 0.99)),
		Max: ms(rtts[len(rtts)-1]),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

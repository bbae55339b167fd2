package stats

import (
	"math"
	"slices"
	"sort"
	"time"
)

// growth is the ratio between consecutive histogram bucket bounds: a value is
// reported with at most 1% relative error, like an HDR histogram with two
// significant digits, while the bucket map stays small enough to ship between
// processes as JSON.
const growth = 1.01

var logGrowth = math.Log(growth)

// Histogram counts durations in logarithmic buckets. The zero value is ready
// to use; histograms from several load-generator processes are combined with
// Merge before percentiles are taken, because percentiles themselves cannot be
// averaged.
type Histogram struct {
	// Counts maps a bucket index to the number of samples in it. Bucket k
	// holds values v (in nanoseconds) with growth^k <= v < growth^(k+1);
	// values below 1 ns land in bucket 0.
	Counts map[int]uint64 `json:"counts"`
	// N is the number of samples.
	N uint64 `json:"n"`
	// Max is the largest sample, kept exactly.
	Max time.Duration `json:"max_ns"`
	// Sum is the sum of all samples, for the mean.
	Sum time.Duration `json:"sum_ns"`
}

// bucket returns the index of the bucket holding d.
func bucket(d time.Duration) int {
	if d < 1 {
		return 0
	}
	return int(math.Floor(math.Log(float64(d)) / logGrowth))
}

// upper returns the exclusive upper bound of bucket k: quoting it for a
// percentile errs on the pessimistic side by at most 1%.
func upper(k int) time.Duration {
	return time.Duration(math.Ceil(math.Exp(float64(k+1) * logGrowth)))
}

// Record adds one sample.
func (h *Histogram) Record(d time.Duration) {
	if h.Counts == nil {
		h.Counts = make(map[int]uint64)
	}
	if d < 0 {
		d = 0
	}
	h.Counts[bucket(d)]++
	h.N++
	h.Sum += d
	if d > h.Max {
		h.Max = d
	}
}

// Merge adds every sample of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.N == 0 {
		return
	}
	if h.Counts == nil {
		h.Counts = make(map[int]uint64, len(o.Counts))
	}
	for k, c := range o.Counts {
		h.Counts[k] += c
	}
	h.N += o.N
	h.Sum += o.Sum
	if o.Max > h.Max {
		h.Max = o.Max
	}
}

// Clone returns a deep copy of h, safe to encode while h keeps recording
// under its owner's lock.
func (h *Histogram) Clone() *Histogram {
	c := *h
	c.Counts = make(map[int]uint64, len(h.Counts))
	for k, v := range h.Counts {
		c.Counts[k] = v
	}
	return &c
}

// Quantile returns the value below which a fraction q (0..1) of the samples
// fall, as the upper bound of the bucket holding that rank and never more than
// the exact maximum. It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	// The rank of the q-quantile, 1-based, nearest-rank definition.
	rank := uint64(math.Ceil(q * float64(h.N)))
	rank = max(rank, 1)
	keys := make([]int, 0, len(h.Counts))
	for k := range h.Counts {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var seen uint64
	for _, k := range keys {
		seen += h.Counts[k]
		if seen >= rank {
			return min(upper(k), h.Max)
		}
	}
	return h.Max
}

// Mean returns the mean sample, or 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.N == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.N)
}

// Summary describes one metric over repeated runs.
type Summary struct {
	// N is how many runs produced the metric.
	N int `json:"n"`
	// Median is the middle value (the mean of the two middle ones for an even N).
	Median float64 `json:"median"`
	// Min and Max bound the runs.
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	// Spread is (Max-Min)/Median, the relative range, 0 for one run.
	Spread float64 `json:"spread"`
}

// Summarize returns the Summary of vs; NaN values are ignored.
func Summarize(vs []float64) Summary {
	clean := make([]float64, 0, len(vs))
	for _, v := range vs {
		if !math.IsNaN(v) {
			clean = append(clean, v)
		}
	}
	if len(clean) == 0 {
		return Summary{}
	}
	slices.Sort(clean)
	n := len(clean)
	med := clean[n/2]
	if n%2 == 0 {
		med = (clean[n/2-1] + clean[n/2]) / 2
	}
	s := Summary{N: n, Median: med, Min: clean[0], Max: clean[n-1]}
	if med != 0 {
		s.Spread = (s.Max - s.Min) / math.Abs(med)
	}
	return s
}

// PerOp divides a resource total by an operation count, returning NaN when no
// operation happened so that a failed run cannot pass for a free one.
func PerOp(total float64, ops uint64) float64 {
	if ops == 0 {
		return math.NaN()
	}
	return total / float64(ops)
}

// Split divides n into k nearly equal parts, the remainder going to the first
// ones: the connections or workers of a phase over its generator processes.
// There are never more parts than n (a process with nothing to do would only
// distort the figures) nor fewer than one.
func Split(n, k int) []int {
	k = max(1, min(k, n))
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

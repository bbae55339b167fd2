package stats

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var h Histogram
	// 1..1000 µs, one sample each: the q-quantile is q*1000 µs.
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	tests := []struct {
		name string
		q    float64
		want time.Duration
	}{
		{"p50", 0.50, 500 * time.Microsecond},
		{"p99", 0.99, 990 * time.Microsecond},
		{"p99.9", 0.999, 999 * time.Microsecond},
		{"max", 1, 1000 * time.Microsecond},
		{"min", 0, 1 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := h.Quantile(tt.q)
			// Bucket upper bounds overstate by at most 1%, never understate.
			if got < tt.want || float64(got) > float64(tt.want)*growth+1 {
				t.Errorf("Quantile(%v) = %v, want %v within +1%%", tt.q, got, tt.want)
			}
		})
	}
	if got, want := h.N, uint64(1000); got != want {
		t.Errorf("N = %d, want %d", got, want)
	}
	if got, want := h.Mean(), 500500*time.Nanosecond; got != want {
		t.Errorf("Mean = %v, want %v", got, want)
	}
}

func TestQuantileEmptyAndMaxCap(t *testing.T) {
	var h Histogram
	if got := h.Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile = %v, want 0", got)
	}
	h.Record(1234 * time.Nanosecond)
	if got, want := h.Quantile(0.999), 1234*time.Nanosecond; got != want {
		t.Errorf("single-sample Quantile = %v, want the exact max %v", got, want)
	}
	h.Record(-5)
	// A negative sample is clamped to 0 and lands in the first bucket.
	if got, want := h.Quantile(0), upper(0); got != want {
		t.Errorf("negative sample Quantile(0) = %v, want %v", got, want)
	}
}

func TestMergeEqualsCombinedRecording(t *testing.T) {
	var a, b, all Histogram
	for i := 1; i <= 500; i++ {
		d := time.Duration(i*i) * time.Microsecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(nil)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		if got, want := m.Quantile(q), all.Quantile(q); got != want {
			t.Errorf("merged Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if got, want := m.Max, all.Max; got != want {
		t.Errorf("merged Max = %v, want %v", got, want)
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{4}, Summary{N: 1, Median: 4, Min: 4, Max: 4}},
		{"odd", []float64{3, 1, 2}, Summary{N: 3, Median: 2, Min: 1, Max: 3, Spread: 1}},
		{"even", []float64{10, 8, 12, 10}, Summary{N: 4, Median: 10, Min: 8, Max: 12, Spread: 0.4}},
		{"nan ignored", []float64{math.NaN(), 5, 5}, Summary{N: 2, Median: 5, Min: 5, Max: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.in)
			if got.N != tt.want.N || got.Median != tt.want.Median || got.Min != tt.want.Min ||
				got.Max != tt.want.Max || math.Abs(got.Spread-tt.want.Spread) > 1e-12 {
				t.Errorf("Summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestPerOp(t *testing.T) {
	if got := PerOp(10, 0); !math.IsNaN(got) {
		t.Errorf("PerOp(10, 0) = %v, want NaN", got)
	}
	if got, want := PerOp(10, 4), 2.5; got != want {
		t.Errorf("PerOp(10, 4) = %v, want %v", got, want)
	}
}

func TestCloneIsDeep(t *testing.T) {
	var h Histogram
	h.Record(time.Millisecond)
	c := h.Clone()
	h.Record(time.Second)
	if got, want := c.N, uint64(1); got != want {
		t.Errorf("clone N = %d, want %d", got, want)
	}
	if got, want := len(c.Counts), 1; got != want {
		t.Errorf("clone has %d buckets, want %d", got, want)
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		n, k int
		want []int
	}{
		{"even", 9800, 4, []int{2450, 2450, 2450, 2450}},
		{"remainder first", 10, 3, []int{4, 3, 3}},
		{"fleet", 50000, 3, []int{16667, 16667, 16666}},
		{"more parts than items", 2, 5, []int{1, 1}},
		{"zero parts", 7, 0, []int{7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Split(tt.n, tt.k); !slices.Equal(got, tt.want) {
				t.Errorf("Split(%d, %d) = %v, want %v", tt.n, tt.k, got, tt.want)
			}
		})
	}
}

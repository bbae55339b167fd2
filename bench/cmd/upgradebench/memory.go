package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edgelb/edge/bench/internal/procfs"
)

// memory is the resident set of both edge processes across an upgrade, in
// bytes.
type memory struct {
	// OldBefore is the old process just before the upgrade.
	OldBefore int64 `json:"old_before"`
	// OldPeak, NewPeak and SumPeak are the largest of the samples taken
	// every -sample from the upgrade's start until the after-window ends;
	// SumPeak is the largest sum of one sample, not the sum of the peaks.
	OldPeak int64 `json:"old_peak"`
	NewPeak int64 `json:"new_peak"`
	SumPeak int64 `json:"sum_peak"`
	// SumPeakAt is when SumPeak was seen, from the upgrade's start.
	SumPeakAt time.Duration `json:"sum_peak_at_ns"`
	// NewAfter is the new process at the end of the after-window.
	NewAfter int64 `json:"new_after"`
	// Samples counts the samples.
	Samples int `json:"samples"`
}

// sampler reads the old and the new process's RSS every tick until stop is
// closed; it finds the new process as the old one's child. It returns the
// peaks and the new process's pid (0 when none was seen).
func sampler(old int, start time.Time, every time.Duration, stop <-chan struct{}) (m memory, newPID int) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		var o, n int64
		o = rss(old)
		if newPID == 0 {
			newPID = childOf(old)
		}
		if newPID != 0 {
			n = rss(newPID)
		}
		m.Samples++
		m.OldPeak = max(m.OldPeak, o)
		m.NewPeak = max(m.NewPeak, n)
		if o+n > m.SumPeak {
			m.SumPeak, m.SumPeakAt = o+n, time.Since(start)
		}
		select {
		case <-stop:
			return m, newPID
		case <-tk.C:
		}
	}
}

// rss is the resident set of pid in bytes, 0 once it has exited.
func rss(pid int) int64 {
	kib, err := procfs.ReadRSS(pid)
	if err != nil {
		return 0
	}
	return kib << 10
}

// childOf is a child process of pid (the first listed by any of its
// threads), or 0.
func childOf(pid int) int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			if c, err := strconv.Atoi(fs[0]); err == nil {
				return c
			}
		}
	}
	return 0
}

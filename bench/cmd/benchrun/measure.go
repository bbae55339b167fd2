package main

import (
	"time"

	"github.com/edgelb/edge/bench/internal/procfs"
)

// usage is the proxy's resources summed over its process tree (nginx runs a
// master and a worker).
type usage struct {
	cpu   time.Duration
	rssKB int64
	fds   int
}

func measure(pid int) usage {
	var u usage
	for _, p := range procfs.Tree(pid) {
		if s, err := procfs.ReadProcStat(p); err == nil {
			u.cpu += s.CPU()
		}
		if r, err := procfs.ReadRSS(p); err == nil {
			u.rssKB += r
		}
		if n, err := procfs.CountFDs(p); err == nil {
			u.fds += n
		}
	}
	return u
}

// treeCPU is the CPU time of pid and its descendants.
func treeCPU(pid int) time.Duration {
	var d time.Duration
	for _, p := range procfs.Tree(pid) {
		if s, err := procfs.ReadProcStat(p); err == nil {
			d += s.CPU()
		}
	}
	return d
}

// coreSample is a /proc/stat snapshot used to tell which core saturated.
type coreSample map[int]procfs.CPUTimes

func sampleCores() coreSample {
	s, err := procfs.ReadCPUStat()
	if err != nil {
		return nil
	}
	return s
}

func coreBusy(before, after coreSample, core int) float64 {
	return procfs.Utilization(before[core], after[core])
}

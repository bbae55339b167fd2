package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClockTick is the unit of the times in /proc/PID/stat and /proc/stat:
// USER_HZ, which Linux fixes at 100 for every user-visible interface
// regardless of the kernel's internal HZ.
const ClockTick = 10 * time.Millisecond

// ProcStat is the part of /proc/PID/stat the benchmark uses.
type ProcStat struct {
	PID  int
	Comm string
	PPID int
	// UTime and STime are CPU time spent in user and kernel mode, in ticks.
	UTime, STime uint64
}

// CPU returns utime+stime as a duration.
func (s ProcStat) CPU() time.Duration {
	return time.Duration(s.UTime+s.STime) * ClockTick
}

// ParseProcStat parses the contents of /proc/PID/stat. The command name is
// in parentheses and may itself contain spaces and parentheses, so the fields
// are counted from the last ')' (proc(5)).
func ParseProcStat(b []byte) (ProcStat, error) {
	open := bytes.IndexByte(b, '(')
	closeIdx := bytes.LastIndexByte(b, ')')
	if open < 0 || closeIdx < open {
		return ProcStat{}, fmt.Errorf("parse /proc stat %q: no (comm)", trunc(b))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return ProcStat{}, fmt.Errorf("parse /proc stat pid: %w", err)
	}
	// Fields after comm: 3 state, 4 ppid, ... 14 utime, 15 stime.
	rest := strings.Fields(string(b[closeIdx+1:]))
	if len(rest) < 13 {
		return ProcStat{}, fmt.Errorf("parse /proc stat of pid %d: %d fields after comm, want at least 13", pid, len(rest))
	}
	s := ProcStat{PID: pid, Comm: string(b[open+1 : closeIdx])}
	if s.PPID, err = strconv.Atoi(rest[1]); err != nil {
		return ProcStat{}, fmt.Errorf("parse /proc stat ppid of pid %d: %w", pid, err)
	}
	if s.UTime, err = strconv.ParseUint(rest[11], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("parse /proc stat utime of pid %d: %w", pid, err)
	}
	if s.STime, err = strconv.ParseUint(rest[12], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("parse /proc stat stime of pid %d: %w", pid, err)
	}
	return s, nil
}

// ParseRSS returns VmRSS in KiB from the contents of /proc/PID/status.
func ParseRSS(b []byte) (int64, error) { return kBField(b, "status", "VmRSS:") }

// Mem is a process's memory in KiB: VmRSS and its two parts from
// /proc/PID/status, and Pss from /proc/PID/smaps_rollup.
//
// VmRSS counts every page the process maps, the pages of its executable
// too, which the page cache holds once however many processes map them:
// summed over twelve processes of one binary it counts those pages twelve
// times. RssAnon is the process's own memory (heap, stacks), RssFile the
// mapped files. Pss (proc(5), "proportional set size") divides each page
// among the processes that map it, so its sum over processes is the
// memory they take together.
type Mem struct {
	RSS, Anon, File, Pss int64
}

// ParseStatusMem returns VmRSS, RssAnon and RssFile in KiB from the
// contents of /proc/PID/status.
func ParseStatusMem(b []byte) (Mem, error) {
	var m Mem
	fields := []struct {
		name string
		v    *int64
	}{{"VmRSS:", &m.RSS}, {"RssAnon:", &m.Anon}, {"RssFile:", &m.File}}
	for _, f := range fields {
		v, err := kBField(b, "status", f.name)
		if err != nil {
			return Mem{}, err
		}
		*f.v = v
	}
	return m, nil
}

// ParsePss returns Pss in KiB from the contents of /proc/PID/smaps_rollup.
func ParsePss(b []byte) (int64, error) { return kBField(b, "smaps_rollup", "Pss:") }

// kBField returns the value of the line "name N kB" in b, the contents
// of the /proc file named file.
func kBField(b []byte, file, name string) (int64, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		v, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse /proc %s %q: want \"%s N kB\"", file, line, name)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc %s %q: %w", file, line, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("parse /proc %s: no %s line", file, strings.TrimSuffix(name, ":"))
}

// ReadMem reads the memory figures of pid.
func ReadMem(pid int) (Mem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Mem{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	m, err := ParseStatusMem(b)
	if err != nil {
		return Mem{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err != nil {
		return Mem{}, fmt.Errorf("read smaps_rollup of pid %d: %w", pid, err)
	}
	if m.Pss, err = ParsePss(b); err != nil {
		return Mem{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return m, nil
}

// CPUTimes is one line of /proc/stat for a core, in ticks.
type CPUTimes struct {
	Busy, Total uint64
}

// ParseCPUStat returns the times of each core ("cpu0", "cpu1", ...) from the
// contents of /proc/stat, indexed by core number. Busy is every column except
// idle and iowait; guest time is already included in user and nice, so it is
// not added again.
func ParseCPUStat(b []byte) (map[int]CPUTimes, error) {
	out := make(map[int]CPUTimes)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		core, err := strconv.Atoi(f[0][3:])
		if err != nil {
			return nil, fmt.Errorf("parse /proc/stat %q: %w", f[0], err)
		}
		var t CPUTimes
		// user nice system idle iowait irq softirq steal [guest guest_nice]
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse /proc/stat %s column %d: %w", f[0], i+1, err)
			}
			t.Total += v
			if i != 3 && i != 4 {
				t.Busy += v
			}
		}
		out[core] = t
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse /proc/stat: no per-core lines")
	}
	return out, nil
}

// Utilization returns the busy fraction (0..1) of a core between two samples.
func Utilization(before, after CPUTimes) float64 {
	total := after.Total - before.Total
	if after.Total <= before.Total {
		return 0
	}
	return float64(after.Busy-before.Busy) / float64(total)
}

// ReadProcStat reads /proc/PID/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	return ParseProcStat(b)
}

// ReadRSS reads VmRSS of pid in KiB.
func ReadRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	return ParseRSS(b)
}

// ReadCPUStat reads /proc/stat.
func ReadCPUStat() (map[int]CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("read /proc/stat: %w", err)
	}
	return ParseCPUStat(b)
}

// Tree returns pid and its descendants. A process that exits during the scan
// is skipped: callers sum figures over a tree that may be changing.
func Tree(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []int{pid}
	}
	children := make(map[int][]int)
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s, err := ParseProcStat(b)
		if err != nil {
			continue
		}
		children[s.PPID] = append(children[s.PPID], n)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// CountFDs returns the number of open descriptors of pid.
func CountFDs(pid int) (int, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, fmt.Errorf("list fds of pid %d: %w", pid, err)
	}
	return len(entries), nil
}

// OnlineCPUs counts the machine's cores from /proc/stat: runtime.NumCPU and
// nproc only see this process's affinity mask, which the benchmark narrows
// with taskset. Without /proc it falls back to runtime.NumCPU.
func OnlineCPUs() int {
	s, err := ReadCPUStat()
	if err != nil {
		return runtime.NumCPU()
	}
	return len(s)
}

// Machine describes the host a run measured, for the reports: figures are
// comparable only between runs on alike machines.
type Machine struct {
	NProc    int    `json:"nproc"`
	Model    string `json:"model"`
	Kernel   string `json:"kernel"`
	MemoryKB int64  `json:"memory_kb"`
	// FDLimit is RLIMIT_NOFILE as "soft/hard": the children inherit it, and
	// it bounds the connections one process can hold.
	FDLimit string `json:"fd_limit"`
}

// ReadMachine describes this host. A figure it cannot read is left empty:
// the description is context for a report, never a reason to fail a run.
func ReadMachine() Machine {
	m := Machine{NProc: OnlineCPUs()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.Model = ParseCPUModel(b)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		_, _ = fmt.Sscanf(string(b), "MemTotal: %d kB", &m.MemoryKB)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		m.FDLimit = fmt.Sprintf("%d/%d", lim.Cur, lim.Max)
	}
	return m
}

// ParseCPUModel returns the first "model name" of the contents of
// /proc/cpuinfo, or "" where there is none (some architectures name it
// otherwise).
func ParseCPUModel(b []byte) string {
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func trunc(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

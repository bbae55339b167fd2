// Package procfs reads the few Linux /proc figures the benchmark needs: a
// process's CPU time (utime+stime from /proc/PID/stat), its resident set
// (VmRSS from /proc/PID/status), its children, per-core busy time from
// /proc/stat, and the description of the machine the reports print. The
// parsers take bytes so they are tested on fixed text.
package procfs

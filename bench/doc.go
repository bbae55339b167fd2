// Package bench holds the reproducible benchmark that compares edge with
// HAProxy and nginx on one machine: a load generator (bench/loadgen), the
// orchestrator (bench/cmd/benchrun) and the helpers they share
// (bench/internal/stats, bench/internal/procfs, bench/internal/wire, and
// bench/internal/proc and bench/internal/tlscert for the orchestrators).
// bench/cmd/fleet runs several edge processes on one port (SO_REUSEPORT)
// and measures the memory of tens of thousands of connections held over
// them. See bench/README.md.
package bench

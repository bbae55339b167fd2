// Package proc starts and stops the child processes of the benchmark
// orchestrators (bench/cmd/benchrun, bench/cmd/fleet): proxies, echo
// backends and load generators. Every child runs in its own process group
// and dies with the orchestrator (PR_SET_PDEATHSIG), so that neither Ctrl-C
// nor a crash leaves one holding the benchmark's ports. A load generator is
// driven over the line protocol of package wire.
package proc

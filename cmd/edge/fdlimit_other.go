//go:build !unix

package main

// descriptorLimit is 0 (unknown) where there is no RLIMIT_NOFILE (Windows
// has no per-process descriptor limit of that kind): connBudget then derives
// no cap, and limits.max_connections is what the file says.
func descriptorLimit() int64 { return 0 }

//go:build !unix

package sockets

// DescriptorLimit is 0 (unknown) where there is no RLIMIT_NOFILE (Windows
// has no per-process descriptor limit of that kind): ConnBudget then derives
// no cap, and limits.max_connections is what the file says.
func DescriptorLimit() int64 { return 0 }

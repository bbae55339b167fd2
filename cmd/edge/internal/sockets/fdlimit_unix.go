//go:build unix

package sockets

import "golang.org/x/sys/unix"

// DescriptorLimit is RLIMIT_NOFILE (the soft limit, which the Go runtime
// raises to the hard one at start), or 0 when it is unknown or too large
// to matter.
func DescriptorLimit() int64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int64(r.Cur)
}

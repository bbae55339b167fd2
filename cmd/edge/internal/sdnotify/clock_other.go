//go:build !linux

package sdnotify

import "errors"

// monotonicMicros has no clock to offer here: systemd, the manager that
// checks MONOTONIC_USEC, runs only on Linux, and golang.org/x/sys/unix does
// not name CLOCK_MONOTONIC on every other system (NetBSD, AIX).
func monotonicMicros() (int64, error) { return 0, errors.ErrUnsupported }

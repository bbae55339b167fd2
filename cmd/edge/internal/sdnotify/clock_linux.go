package sdnotify

import (
	"time"

	"golang.org/x/sys/unix"
)

// monotonicMicros reads CLOCK_MONOTONIC, the clock systemd compares
// MONOTONIC_USEC against (sd_notify(3)); Go's time package keeps its
// monotonic reading to itself.
func monotonicMicros() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return ts.Nano() / int64(time.Microsecond), nil
}

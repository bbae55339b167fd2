package consul

import (
	"cmp"
	"log/slog"
	"time"
)

// Defaults every follower of a blocking query shares, decided here once.
const (
	// DefaultWaitTime is Consul's own default wait; its maximum is 10m.
	DefaultWaitTime = 5 * time.Minute
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait after a
	// failed query (Backoff).
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// Or gives *p the default d when it is unset: zero, negative, or empty.
func Or[T cmp.Ordered](p *T, d T) {
	var zero T
	if *p <= zero {
		*p = d
	}
}

// Follow fills the settings every follower of a blocking query has, where
// its options left them unset: the wait, the backoff's bounds, a logger
// that discards and the wall clock. A follower with its own defaults sets
// them with Or first.
func Follow(wait, minBackoff, maxBackoff *time.Duration, log **slog.Logger, now *func() time.Time) {
	Or(wait, DefaultWaitTime)
	Or(minBackoff, DefaultMinBackoff)
	Or(maxBackoff, DefaultMaxBackoff)
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
	if now != nil && *now == nil {
		*now = time.Now
	}
}

package ready

import "time"

// Memory return after churn: after at least trimAfterConns new
// connections, once no more than trimTrickle further ones arrived within
// trimQuiet, at most once per trimEvery, the owner is told (Options.Quiet;
// cmd/edge then returns the burst's garbage, cmd/edge/internal/gcpace). Every TLS
// handshake leaves garbage the collector keeps as headroom, so RSS after a
// burst is about twice the live heap until then.
//
// The traffic of the connections already up does not delay it. It once
// did (the trim waited until no socket had an event for two seconds), so
// that the forced collection would never pause a message; but a steady
// 1 % of connections sending and pings every 30 s never leave a socket
// still that long, and the burst's garbage was kept for good (memory per
// held connection settled well above what it is with no traffic:
// docs/BENCHMARKS.md, "settled memory per held connection"). What the wait protected is small: a forced
// collection is a concurrent one whose caller (the sweeper) waits; the
// pollers, woken by Go's netpoller, keep running beside its mark workers,
// and its sweep yields after every span; only giving the freed pages back
// (madvise) holds the P throughout. BenchmarkReturnMemory
// (cmd/edge/internal/gcpace: 12,000 connections' live heap, 16 MiB of
// garbage, GOMAXPROCS=1) measures a call in milliseconds and delays the
// messages arriving meanwhile by less (docs/BENCHMARKS.md, "settled
// memory per held connection"). At most once a minute, that touches
// under 0.1 % of the messages of any load, so it cannot move a p99 (issue 22's p99 of active messages ≤ 5 ms would need
// 1 %). A trickle of reconnects (trimTrickle) does not count as a burst
// still under way: at 100,000 connections a few always come and go.
const (
	trimAfterConns = 1000
	trimTrickle    = 10
	trimQuiet      = 2 * time.Second
	trimEvery      = time.Minute
)

// trimmer decides when the sweeper says a burst is over (see
// trimAfterConns). It is fed the count of connections ever added at each
// sweep.
type trimmer struct {
	adds, trimmedAdds int64
	// The window: since, in unix nanos, no more than trimTrickle
	// connections were added to sinceAdds.
	since, sinceAdds int64
	lastTrim         int64
}

// due reports, at now, with adds connections ever started, whether a trim
// is due.
func (t *trimmer) due(now, adds int64) bool {
	t.adds = adds
	if adds-t.sinceAdds > trimTrickle {
		t.since, t.sinceAdds = now, adds
		return false
	}
	return adds-t.trimmedAdds >= trimAfterConns && now-t.since >= int64(trimQuiet) && now-t.lastTrim >= int64(trimEvery)
}

// done records a trim at now.
func (t *trimmer) done(now int64) { t.trimmedAdds, t.lastTrim = t.adds, now }

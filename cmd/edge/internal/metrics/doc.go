// Package metrics is the one place edge meets Prometheus: its private
// registry, the counters fed by the core packages' Observer interfaces
// (proxy.Observer, discovery.Observer, health.Observer, edgetls.Observer)
// and the process upgrade's (ProcessUpgraded, HandedOff),
// and the gauges read at scrape time from what cmd/edge hands it (the
// pools, and a State of functions over the admin server, the proxy, the
// watchers and the terminators), so a gauge can never disagree with
// /status and a series of a pool that left vanishes without bookkeeping.
//
// Metric names and labels are an interface: the alert rules and their
// promtool tests (deploy/prometheus), the Grafana dashboard and operators'
// queries depend on them. InitSeries creates every known label set at zero
// for each pool and listener, so rate() and the alerts see a series before
// its first event; ForgetPool drops a pool's series when it goes.
//
// HTTPErrorLog is net/http's ErrorLog: crypto/tls exports no error types
// for handshake failures and net/http hands them only to that log, so the
// line's text is classified (tlsFailure) and counted by reason.
//
// The package imports the packages whose Observer interfaces it implements
// and none of cmd/edge; cmd/edge builds one Registry and wires it.
package metrics

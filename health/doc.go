// Package health actively probes the backends of a pool and flips their
// health, so edge never relies on the registry's word alone: a backend Consul
// calls healthy may still be unreachable from the proxy (fabio#393).
//
// A Checker takes the pool's current balance.Snapshot at every tick, probes
// each backend every Interval with bounded concurrency, and applies rise/fall
// thresholds through Backend.SetHealthy (an atomic flag; no snapshot is
// rebuilt). A change is logged at Info once; steady results are not logged.
//
// Probe types:
//   - tcp: a TCP connection is established within Timeout.
//   - http: GET Path (fasthttp client, a fresh connection per probe) answers
//     ExpectStatus.
//   - websocket: a real opening handshake on a raw connection (RFC 6455
//     section 4): GET with Upgrade headers and a random Sec-WebSocket-Key,
//     the answer read with http.ReadResponse, 101 with the right
//     Sec-WebSocket-Accept expected; with Ping, a masked ping frame is sent
//     and frames are read until the matching pong (haproxy#1009,
//     tengine#1239).
//
// New backends: balance starts every backend healthy. When a pool has active
// checks, the Checker marks a backend it sees for the first time unhealthy
// and probes it at once; it becomes available after its first passing probe
// (later recoveries need Rise passes). The window between Pool.Update and the
// Checker noticing the new snapshot is one tick (at most 100 ms). Backends
// that leave the snapshot are forgotten; a backend whose address changed is a
// new *balance.Backend and starts over.
package health

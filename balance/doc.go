// Package balance is the pure, in-memory heart of edge: backends, immutable
// snapshots of a pool's membership, and the choice of a backend for one
// connection (sticky cookie, client-IP rendezvous hashing with bounded load,
// power-of-two-choices least-connections with weights), plus passive-failure
// ejection and per-client admission limits.
//
// It performs no I/O and imports no networking package beyond net/netip.
// Discovery and health checks feed it; the proxy asks it. Readers never lock:
// a Pool publishes an immutable Snapshot through an atomic pointer and keeps
// per-backend state (health, active connections, failures) in atomics on a
// stable *Backend that survives membership updates.
package balance

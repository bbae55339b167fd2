// Package balance is the pure, in-memory heart of edge: backends, immutable
// snapshots of a pool's membership, and the choice of a backend for one
// connection (sticky cookie, client-IP rendezvous hashing with bounded load,
// power-of-two-choices least-connections with weights), plus passive-failure
// ejection and per-client admission limits.
//
// It performs no I/O and imports no networking package beyond net/netip.
// Discovery and health checks feed it; the proxy asks it.
//
// # Concurrency
//
// Readers never lock: a Pool publishes an immutable Snapshot through an
// atomic pointer, and Pick does one atomic load, no locking and no
// allocation. Per-backend state (health, active connections, ejection) lives
// in atomics on a stable *Backend that survives membership updates, so
// health flaps need no rebuild and live connections keep valid pointers.
// Update rebuilds the snapshot under a writer mutex from the full member
// list (never deltas). A removed backend that still holds connections is
// remembered, so a member that flaps out of the registry and back keeps its
// counters: least-connections does not lose its memory (traefik#13913).
//
// # Picking
//
// Cookie mode: the cookie value is base64url(HMAC-SHA256(key, pool, id))
// truncated to 128 bits, precomputed per backend and key when a snapshot is
// built and looked up by exact match in a map. It is unforgeable without the
// key and reveals no address. Keys rotate: values under any configured key
// are accepted, and a client holding an old-key value is re-issued the
// current one (Result.SetCookie). Every edge of a fleet sharing the key
// issues and honours the same values, so stickiness needs no shared state
// (fabio#101). Without a configured key a random one is generated, and
// cookies then neither survive a restart nor work across a fleet.
//
// ClientIP mode: weighted rendezvous (highest random weight) hashing over a
// deterministic hash (FNV-1a 64 with the splitmix64 finalizer; no per-process
// seed), so independent edges with the same members agree on every client,
// and adding one of N+1 backends moves only about 1/(N+1) of clients, all to
// the new backend (unlike ingress-nginx#4475, where scaling from one pod to
// two moved half the sessions). A bounded-load rule keeps one hot address
// range from overloading a backend: a backend is passed over for the next in
// score order only when one more connection would put it above both
// BoundedLoad (default 1.25) times its weighted share of connections and
// that share plus MinExcess (default 64). The floor matters on a lightly
// loaded pool, where the mean is tiny and a factor alone would spill one
// client's own connections (a NATed office, a browser's tabs); and since
// the edges of a fleet each count only their own connections, it is what
// keeps them choosing alike under normal load. Only a backend with a real
// excess sheds clients, and each of them goes to its own next choice, which
// every edge computes alike too.
//
// LeastConn mode, and the fallback of the others: power of two random
// choices, comparing (Active+1)/Weight.
//
// # Slow start
//
// With PoolOptions.SlowStart a backend that joins (Member.Since), comes back
// from ejection (at the ejection's end) or passes an active check again
// after failing ramps from a tenth of its weight to all of it, in twenty
// steps, so least-connections does not hand an empty backend every new
// connection until it has caught up (HAProxy slowstart, Envoy
// slow_start_config). Picks compare weight times share in exact integers;
// rendezvous hashing scores and bounds with the ramped weight, so a joining
// backend takes the clients hashed to it a step at a time. The ramp of a
// joining backend runs from the time the member carries, not from when the
// pool learned of it, so every edge given the same time ramps alike; the
// clock is read once per pick, and only while some backend ramps.
//
// # Passive ejection
//
// ReportFailure counts failures in a small per-backend ring under a
// per-backend mutex that Pick never takes; enough failures within a window
// eject the backend until a cooldown ends, after which it returns on its own
// with a fresh count. Ejection is capped per pool, like Envoy's
// max_ejection_percent: at most EjectOptions.MaxPercent of the members (at
// least one in a pool of two or more) are out at once, and never the last
// member that is healthy and not ejected, so no run of failures, whoever
// caused them, can empty a pool. A failure beyond the cap stays counted and
// asks again with the next one. The decision takes a per-pool mutex that
// only failing reporters take; Pick still never locks.
//
// # Admission
//
// Limiter caps concurrent connections and the rate of new connections per
// client address (IPv6 grouped by /64 by default), in sharded maps that
// forget idle clients, so a reconnect storm is refused early and memory
// tracks live load rather than every address ever seen.
//
// # Fleet-scope limits
//
// A pool's MaxConnsPerBackend and its Bucket can hold the fleet's limit
// instead of one process's: Backend.SetConnShare and Bucket.SetRate set
// this edge's share, computed by ConnShare, RateShare and EdgeWeights from
// the load every edge last published (fleet.go states the rule and its
// bound), or by FallbackConnShare when those numbers are stale. Picks and
// TryAcquire read the share as they read the pool's limit: one atomic.
// client_ip hashing never reads fleet counts, so every edge still names
// the same backend for an address.
//
// # Rebalancing live connections
//
// A Rebalancer is one pool's policy for moving live connections off the
// backends above their fair share of the fleet's connections (by
// effective weight, after slow start): an episode starts when the largest
// ratio to the fair share stays above 1+Tolerance for Settle, and ends
// within 1+Tolerance/2 (hysteresis); during it each tick spends the
// fleet's budget (Rate moves a second), divided among the over-share
// backends by their excess and taken by each edge in proportion to what
// it holds there, never below the band and never more than it holds. It
// decides counts only; which connections go (those older than the
// episode, so none moves twice) and how (a close frame) is its caller's
// (rebalance.go). A backend whose connections are being moved is marked
// (Backend.SetShedding): the pick leaves it out while another is usable,
// and a cookie naming it is not honoured, so a moved client lands under
// its share instead of coming back.
//
// # Canaries
//
// Members carry a version (Member.Version). A Canary, set in a Layer of
// either scope like the operators' other settings, gives one version a
// share of the pool's weight (CanaryWeight): least-connections draws and
// compares by those weights, so the version fills to its share and then
// takes that share of new connections; a side with no usable backend
// leaves everything to the other. With a Rate, the same Rebalancer moves
// the live connections to the split, the other side shed entirely at
// Share 1 (BackendLoad.Shed). client_ip pools ignore canaries: their hash
// places a client (canary.go).
package balance

// Package discovery keeps edge's pools in step with Consul: one Watcher per
// pool follows a service with blocking queries on the health endpoint and
// gives the pool the full, sorted member list (never deltas) through
// balance.Pool.Update.
//
// # Watching
//
// Blocking queries follow Consul's "Blocking Queries" rules: an answer with
// the index that was sent is a timeout and changes nothing; an index lower
// than before resets the wait index to 0; an index of 0 is replaced by 1.
// After an error the next query carries no index: the agent may have
// restarted, and an index from before is no longer comparable (one that lands
// exactly on ours would hide a change until the next one). Errors are retried with exponential backoff and jitter (100 ms to 30 s by
// default) and every wait ends with the context.
//
// An error never changes membership: only a successful answer does. The
// pool keeps serving what it had while Consul is down or restarting
// (fabio#861, fabio#162).
//
// # Translation
//
// Members (a pure function) turns an answer into members: passing instances
// (optionally also warning ones), ID "node/serviceID", address from
// Service.Address or else Node.Address, weight from Service.Weights or the
// "edge-weight" meta key. Instances in maintenance mode are critical and
// therefore absent.
//
// # Panic threshold
//
// An answer that keeps fewer than PanicThreshold (default 50 %) of the
// members accepted before it is held back for PanicHold (default 1 minute):
// the pool serves the known members plus any new ones, Status reports Panic
// with the number of members held, and a warning is logged. If the answer
// recovers within the hold, nothing was lost; if the small answer persists,
// it is believed after the hold (a genuine large scale-down). This keeps a
// flapping registry, a Consul server restarted without its state, or a
// partition between Consul and the checks from emptying a pool in one step.
// Held members that are really gone fail their dials (the proxy retries
// elsewhere) and fail active health checks when the pool has them. A pool of
// one member is protected too: losing its only member is a 100 % drop.
//
// # Persistence
//
// With StateDir, every published set is written to
// StateDir/discovery-<pool>.json (temporary file, fsync, rename) and Run
// restores it before the first query, so a fresh edge serves while Consul is
// down (traefik#1689). Status shows the source ("persisted" or "consul"), the
// last index, the last contact and the staleness, and the last error.
//
// # Routes declared in the registry
//
// A service may declare its own route with tags or meta:
//
//	tag  edge.host=chat.example.com[,other.example.com]   (repeatable)
//	tag  edge.path=/ws                                     (path prefix)
//	tag  edge.sticky=none|cookie|client_ip
//	tag  edge.max-conns=1000
//	tag  edge.max-conns-per-client-ip=20
//	tag  edge.health=tcp|http|websocket
//	tag  edge.health-interval=2s
//	meta edge-route-host, edge-route-path, edge-route-sticky, edge-route-max-conns, ...
//	tag  edge                                              (marker for meta-only declarations)
//
// A declaration needs a host or a path. Hosts are put in the canonical form
// of internal/hostname (ASCII lower case, no trailing dot), the same as the
// file's and the request's. Unknown edge.* keys, bad values and conflicting
// values are errors: ParseRouteDecl reports them, RouteWatcher ignores that
// declaration (keeping the service's previous valid one, if any) and lists
// the problem in RouteStatus.Warnings; nothing panics. All instances of a
// service that declare a route must declare the same one. RouteWatcher
// reports every valid declaration, with Registered set to the lowest Consul
// CreateIndex of the service's instances.
//
// Admission (AdmitRoutes, a pure function of the declarations, the file's
// RoutePolicy and the routes held so far) decides which declarations get a
// route; each is admitted or refused whole, and a refusal never blocks the
// others, a reload or a later registry change. Declared routes are off
// unless the file allows them: a declared host must be covered by
// consul.routes.allowed_hosts, and a declaration without a host needs
// consul.routes.allow_any_host. The file always wins: a declaration is
// refused when a host of it is a host the file routes or lies under a
// wildcard of the file (whatever its path), or when its path lies under a
// prefix the file routes for any host, so the registry can add routes but
// never take over one an operator wrote down; the proxy matches the file's
// routes first on every request as well. When two services claim the same
// host and path prefix, the holder keeps it while it declares it, and
// otherwise the older registration (lower Registered) wins; a newcomer
// cannot win by its name, which only breaks a tie of equal indexes.
//
// # Pools of declared routes
//
// DeclaredPools keeps one running pool per admitted declaration, fed by a
// RouteWatcher (SetDeclared) and by the owner after a reload (Reconcile).
// It decides, and the owner builds: a PoolHost (cmd/edge) supplies the
// file's policy and turns a declaration into a DeclaredPool (a balance
// pool with its watcher and checker), and hears when a pool is removed and
// when the admitted routes changed. A declaration that changes only its
// routes keeps its pool and its connections' backends; one that changes
// the pool's settings (RouteDecl.SamePool) gets a new pool, the old one
// stopped first; each refusal is logged once, for as long as it lasts.
// Run owns the pools' goroutines: each pool runs under a context derived
// from Run's, cancelled when its declaration goes, and Run returns only
// once every pool has stopped.
//
// # Self-registration and client
//
// Register puts edge itself in the catalog with an HTTP check on the admin
// /readyz and returns the deregistration for shutdown; KeepRegistered
// registers several, retrying while the agent is away, and deregisters
// them when its context ends (Advertised and CheckAddr say what to
// announce for a bound address). NewClient starts from
// api.DefaultConfig (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_CACERT...)
// and applies explicit settings on top; the token is never logged. Its
// transport bounds every answer (unix sockets included): at
// ClientOptions.MaxResponseBytes, and tighter at the bound a request's
// context carries.
//
// # Reading what anyone may write
//
// Every KV read of this package is bounded before anything is decoded,
// and none lists a prefix's values: a single entry is read under a bound
// of its value's size (getBounded: ticket and cookie keys, staples, fleet
// actions, upgrade holders), so a value at Consul's 512 KiB maximum costs
// at most that bound; a prefix is followed by its key names (listKeys),
// and Consul says in read-only transactions of check operations, which
// carry no value, which keys changed since they were read and which no
// session holds (checkKeys). The readers refuse a client whose transport
// did not apply their bound (one not made by NewClient).
//
// # Session-ticket keys for a fleet
//
// TicketKeys keeps a fleet's TLS session-ticket keys in one KV entry in the
// key-file format, the second line a staged next key. Any edge that reads
// the entry once its rotation is due rotates it with a check-and-set on the
// index it read, so exactly one write wins and no leader is needed; the
// entry's Flags hold the time of the last rotation. A value that does not
// validate is reported and never overwritten. Given the key-file parser
// (edgetls.ParseTicketKeys, which owns the format), a TicketKeys is the
// Terminator's TicketKeySource. With a SealKey the entry is sealed
// (sealedentry.go: AES-256-GCM, the format's version, the entry's path and
// its Flags as associated data), so a reader of the entry without the
// fleet's seal key learns no key and a writer without it cannot give
// edges keys of theirs. An entry that does not open is refused (a
// *RefusedEntryError, which says why) and never overwritten; one in the
// clear is refused too, and once due is replaced by fresh keys, sealed.
//
// # Cookie keys and OCSP staples for a fleet
//
// CookieKeys keeps a cookie pool's signing keys the same way (32-byte keys),
// follows the entry with a blocking query so a rotation reaches every edge
// at once, and feeds balance.Pool.SetCookieKeys; ParseCookieKeys bounds an
// entry (8 KiB, 16 keys of 16 to 256 bytes), and its answers are cut at
// that size before they are decoded (a ticket-key entry's at
// MaxTicketKeysBytes). Staples keeps OCSP responses
// under PREFIX/ocsp/<certificate id> with a Consul lock (a session and an
// acquire on the same key plus ".lock") so one edge at a time asks the
// responder; it is edgetls's StapleShare, which verifies what it reads.
//
// # Fleet load
//
// FleetLoad publishes one record per edge (FleetRecord: id, address,
// version, pid, readiness, connections, each pool's per-backend active
// counts and recent new-connection rate) under PREFIX/edges/<id>, bound to
// a Consul session with a TTL and behaviour delete, so a dead edge's
// record vanishes by itself; it writes at most once every PublishEvery (2
// s) and only when the load changed, and a stopping edge destroys its
// session. It follows the prefix's keys with one blocking query (at most
// 1 MiB of names, MaxFleetKeys looked at) and publishes each answer as an
// immutable FleetSnapshot (Total, Size, Edge), which fleet-scope limits
// and the fleet's /status view read. A key no session holds is refused
// unread; a key unchanged since it was read keeps what was read; only the
// changed keys a session holds are read, one by one, each answer cut at
// MaxFleetRecordBytes before it is decoded (an oversized one is refused
// unread, once per change), at most MaxFleetEdges a round. Every refusal
// is logged once and counted in Status (Refused, Unheld, Oversized,
// Excess). Reads start at most every ReadInterval (250 ms), and a read
// that read no record holds the next for QuietInterval (the wait, 5 s),
// so a writer of keys the edge does not count wakes it no more often
// than a quiet fleet does, at the price of delaying a real change by at
// most that much while they write. What is read is bounded (64 KiB a
// record, 256 edges, 256 pools, 4096 backends a pool), versioned
// (FleetRecordVersion; another version is refused), filed under its own
// id, and cut to the pools and backends the edge has
// (FleetLoadOptions.Known, applied at every snapshot, since what the edge
// has changes): a hostile writer can skew the numbers of registered
// backends, never name another. Status says when the sums are stale (no
// answer within StaleAfter, or a failed query or publication).
//
// FleetShares is the policy between the two: it makes the pools' part of
// this edge's record (Loads: rates, counts, claims) and, from every
// snapshot, sets this edge's share of each fleet-scope limit with the
// functions of balance (Apply), or the limit divided by the last fresh
// fleet size while the numbers are stale. A share is lowered at once and
// raised only to a claim Consul holds (Published), so the other edges can
// count it. cmd/edge only hands it the snapshot and its pools.
//
// # Fleet actions
//
// FleetActions keeps the operator's actions of fleet scope (drain, disable,
// enable, weight; FleetAction) in Consul KV, one entry per pool and backend
// under PREFIX/admin/<pool>/<backend> (path-escaped), written by Act with
// a check-and-set and followed by every edge with one keys-only blocking
// query on the folder, each entry then read on its own, so a refused entry
// (too large, too many, broken) is refused alone and the valid ones stay in
// force; an edge that starts reads them (Load) before it serves, or, while
// Consul does not answer, the last set it read (StateDir), and a
// backend that joins later gets its action in the snapshot that adds it
// (Joining). An entry is applied through balance.Pool.SetOverride, and a
// new drain sends the backend's live connections 1012 over its window,
// like the local drain. What is read is bounded (MaxFleetActionBytes an
// entry, its answer cut at that size before it is decoded, MaxFleetActions
// entries fetched, keys naming this edge's
// backends first, MaxFleetActionsResponse an answer through
// ClientOptions.MaxResponseBytes), versioned (FleetActionVersion),
// checked (state, weight, window, canonical keys) and applied only to
// backends the edge has: a refused entry is logged once and changes
// nothing.
//
// # Upgrade slots
//
// UpgradeSlots paces a fleet's process upgrades with Consul's semaphore
// (api.Semaphore) at PREFIX/upgrade: an edge takes one of Limit slots
// before it starts its new process and gives it back once its connections
// are handed over. Each wait has a session of its own (behavior delete, TTL
// 15 s, renewed by a goroutine that Acquire starts and release ends), so a
// dead holder's slot frees itself; a wait is bounded, and says who holds
// the slots at its start and after every round of blocking query. What is
// read to name the holders is bounded (the lock 64 KiB, a holder 1 KiB,
// eight named) and made printable; the semaphore's own reads are bounded by
// Consul's value size.
//
// # Join times
//
// A Watcher stamps a member that appears in an answer after its first with
// the arrival of that answer (balance.Member.Since, kept in the state file):
// every edge's blocking query returns the answer of the same Raft index
// within milliseconds, so slow start ramps the member alike on every edge.
package discovery

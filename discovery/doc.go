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
// # Self-registration
//
// Register puts edge itself in the catalog with an HTTP check on the admin
// /readyz and returns the deregistration for shutdown; KeepRegistered
// registers several, retrying while the agent is away, and deregisters
// them when its context ends (Advertised and CheckAddr say what to
// announce for a bound address).
// The Consul client, the blocking-query rules and the bounded reads are
// internal/consul's, shared with package fleet.
//
// # Join times
//
// A Watcher stamps a member that appears in an answer after its first with
// the arrival of that answer (balance.Member.Since, kept in the state file):
// every edge's blocking query returns the answer of the same Raft index
// within milliseconds, so slow start ramps the member alike on every edge.
package discovery

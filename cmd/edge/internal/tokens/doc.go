// Package tokens is edge's token component: the providers of the file
// with the key sources behind them (fetched and refreshed in the
// background, the last good keys kept), the policy each pool gets
// (PoolAuth, a proxy.Auth with the verifier of the providers it names),
// and the revocations in force.
//
// Revocations come from three places, each with its own lifetime: the
// file (auth.revoked, replaced on reload), this edge's admin API (scope
// local, kept in state_dir/revocations.json so a restart keeps them) and
// the fleet (scope fleet: stored under the fleet's Consul prefix by
// fleet.Revocations, which every edge follows and saves in its own
// state_dir). Whenever one changes, and once a minute to forget the
// entries whose tokens can no longer be valid, the union is compiled
// (auth.CompileRevocations) and handed to the proxy (Target), which
// refuses matching upgrades and closes the matching live connections.
//
// Every goroutine (each source's refresh, the minute's recompilation)
// runs under Run's context.
package tokens

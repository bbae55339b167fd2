// Package consul holds the Consul mechanics the registry (package
// discovery) and the fleet (package fleet) share: the client (NewClient),
// the rules of blocking queries (NextIndex), the backoff after a failed
// query (Backoff), the defaults of a follower (Follow, Or), bounded KV reads
// (GetBounded, ListKeys, CheckKeys) and state files (WriteState).
//
// # Client
//
// NewClient starts from api.DefaultConfig (CONSUL_HTTP_ADDR,
// CONSUL_HTTP_TOKEN, CONSUL_CACERT...) and applies explicit settings on
// top; the token is never logged. Its transport bounds every answer (unix
// sockets included): at ClientOptions.MaxResponseBytes, and tighter at the
// bound a request's context carries (WithResponseLimit).
//
// # Reading what anyone may write
//
// Every KV read through this package is bounded before anything is decoded,
// and none lists a prefix's values: a single entry is read under a bound
// of its value's size (GetBounded: ticket and cookie keys, staples, fleet
// actions, upgrade holders), so a value at Consul's 512 KiB maximum costs
// at most that bound; a prefix is followed by its key names (ListKeys),
// and Consul says in read-only transactions of check operations, which
// carry no value, which keys changed since they were read and which no
// session holds (CheckKeys). The readers refuse a client whose transport
// did not apply their bound (one not made by NewClient).
package consul

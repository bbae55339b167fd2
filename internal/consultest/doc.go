// Package consultest starts a real Consul agent for tests: `consul agent
// -dev` bound to loopback on free ports, with its own data directory, and
// waits until the agent has elected itself leader. Stop and Restart (same
// ports, same data directory) let tests kill Consul under live traffic.
//
// The binary is EDGE_CONSUL_BIN or the cache path of scripts/consul.sh,
// which builds Consul v1.15.4 (the last MPL-2.0 release) once per machine.
package consultest

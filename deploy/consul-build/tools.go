//go:build tools

// Package consulbuild pins the Consul agent v1.15.4 (the last MPL-2.0
// release) so scripts/consul.sh can build it from the Go module proxy. It is
// a module of its own, so ./... of the edge module never includes it.
package consulbuild

import _ "github.com/hashicorp/consul"

//go:build tools

// Package prometheusbuild pins a Prometheus server with Consul service
// discovery so scripts/prometheus.sh can build it from the Go module proxy
// for edge's monitoring tests (Debian's prometheus package is built without
// Consul SD). It is a module of its own, so ./... of the edge module never
// includes it.
package prometheusbuild

import _ "github.com/prometheus/prometheus/cmd/prometheus"

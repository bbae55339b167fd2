// Package conf is edge's configuration file: the schema as typed structs,
// the defaults, [Load] and [Parse], and [Config.Validate].
//
// # Format
//
// The file is YAML. Operators of Prometheus, Kubernetes, Envoy and Traefik
// already write it every day, it has comments (JSON has none), and its
// parser hands back a node tree with a line number on every key and value.
// That tree is what makes strict errors possible: conf decodes the nodes
// itself instead of letting a generic decoder stop at the first surprise,
// so every unknown key, wrong type and impossible value in the file is
// reported at once, as
//
//	edge.yaml:14: pools[0].timeouts: unknown key "dail" (did you mean "dial"?)
//
// The returned error is an [*Errors] holding one [*Error] per problem.
// Anchors, aliases and merge keys ("<<: *common") work; top-level keys
// starting with "x-" are ignored so that shared blocks can be defined there
// (as in Docker Compose). Exactly one YAML document is read.
//
// # Defaults
//
// Every key is optional except listeners[].address, pools[].name, a pool's
// backends (or consul.service) and routes[].pool. The default of each
// setting is documented on its field and applies when the key is absent or
// null; a value written in the file, zero included, is kept. So
//
//	listeners: [{address: 127.0.0.1:8080}]
//	pools: [{name: app, backends: [{address: 127.0.0.1:9001}]}]
//	routes: [{default: true, pool: app}]
//
// is a complete configuration. testdata/full.yaml shows every key.
//
// Zero values with a meaning: timeouts.idle 0 never closes a quiet
// WebSocket; drain.window 0 closes everything at once; passive_ejection
// failures 0 turns ejection off; limits 0 are unlimited; cookie max_age 0
// makes a session cookie; a backend weight of 0 means 1. A bound that
// must hold (timeouts.dial, handshake and write, websocket.linger_bytes)
// refuses 0. docs/ARCHITECTURE.md ("Where defaults live") states this
// convention once for the file and every component: cmd/edge maps the
// file's 0 onto each component's "off" (a negative value where the
// component's 0 is a default).
//
// # Paths and secrets
//
// Relative paths (state_dir, cert_file, key_file, client_ca_file,
// session_tickets.key_file, secret_file, previous_secret_file, token_file,
// ca_file) are resolved against the directory of the configuration file,
// so /etc/edge/edge.yaml naming certs/a.pem means /etc/edge/certs/a.pem
// whatever edge's working directory is. Validate checks that named files
// exist; the components parse them.
//
// Secrets come from files or the environment and nowhere else:
// [Cookie.Secrets] reads the cookie signing keys from secret_file or the
// variable named by secret_env, and [Consul.ACLToken] reads the Consul
// token from token, token_file or CONSUL_HTTP_TOKEN. The environment
// overrides nothing else. No error, [Config.String] or log value ever
// contains a secret: the inline consul token is a [Secret], which prints
// as "[redacted]".
//
// conf imports nothing else of edge; cmd/edge maps a Config onto each
// component's Options.
package conf

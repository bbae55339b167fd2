#!/usr/bin/env bash
# Runs the edge demo on this machine: a local Consul dev agent, three
# WebSocket backends that register themselves in it, and edge with a
# self-signed certificate discovering them. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
root=$(pwd)
work="$root/.cache/demo"
mkdir -p "$work" bin

# fail stops the demo with a message and the end of a log.
fail() {
	echo "demo: $1; the end of its log ($2):" >&2
	tail -20 "$2" | sed 's/^/    /' >&2
	exit 1
}

# port_taken succeeds when another program holds the port on this machine:
# it accepts a TCP connection on 127.0.0.1, or, where ss(8) can tell, has
# it bound for TCP or UDP on any address (Consul's Serf ports are both).
port_taken() {
	if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
		return 0
	fi
	command -v ss >/dev/null && [ -n "$(ss -Hlntu "sport = :$1" 2>/dev/null)" ]
}

# Every port the demo listens on, all on 127.0.0.1. Consul's are off its
# standard ones (8300-8302, 8500, 8502, 8503, 8600), so that the demo runs
# beside an agent a machine already has; its DNS and gRPC ports are turned
# off. They are checked before anything starts: a program started on a
# taken port would fail, or the demo would talk to someone else's server.
ports=(
	"8443 edge's wss listener"
	"8080 edge's ws listener"
	"9901 edge's admin listener"
	"9001 backend-1"
	"9002 backend-2"
	"9003 backend-3"
	"18500 the demo's Consul agent (HTTP API)"
	"18300 the demo's Consul agent (server RPC)"
	"18301 the demo's Consul agent (Serf LAN)"
	"18302 the demo's Consul agent (Serf WAN)"
)
taken=0
for p in "${ports[@]}"; do
	port=${p%% *}
	if port_taken "$port"; then
		echo "demo: port $port, for ${p#* }, is already in use on this machine." >&2
		command -v ss >/dev/null && ss -Hlntup "sport = :$port" 2>/dev/null | sed 's/^/    /' >&2
		taken=$((taken + 1))
	fi
done
if [ "$taken" -gt 0 ]; then
	echo "demo: the demo's ports are fixed: stop the program that holds them (ss -ltnup or lsof -nP -i shows which; an earlier demo stops with Ctrl-C) and run scripts/demo.sh again." >&2
	exit 1
fi

command -v openssl >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null; }

echo "building edge, edge-backend and wsclient..."
scripts/build.sh -o bin/ ./cmd/edge ./cmd/edge-backend ./cmd/wsclient

if [ ! -f "$work/cert.pem" ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$work/key.pem" -out "$work/cert.pem" -days 365 \
		-subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
	(umask 077 && head -c 32 /dev/urandom | base64 >"$work/cookie-secret")
fi
# edge refuses a secret that group or others can read (docs/SECURITY.md:
# "Secret files"); a demo directory from an older run may hold one.
chmod 600 "$work/key.pem" "$work/cookie-secret"

pids=()
cleanup() {
	trap - INT TERM EXIT
	echo
	echo "stopping..."
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

# wait_for waits until a command it started is ready, checking every 0.2 s
# at most tries times; it stops the demo with the command's log when the
# command exits first or is not ready in time.
#   wait_for WHAT PID LOG TRIES CHECK...
wait_for() {
	local what=$1 pid=$2 log=$3 tries=$4
	shift 4
	for _ in $(seq 1 "$tries"); do
		kill -0 "$pid" 2>/dev/null || fail "$what exited" "$log"
		"$@" && return 0
		sleep 0.2
	done
	fail "$what was not ready within $((tries / 5)) s" "$log"
}

consul_addr=127.0.0.1:18500
# The agent's node name is this run's, so that the demo goes on only
# against the agent it started, never one that answers on its port.
consul_node="edge-demo-$$"
# consul_ready: the demo's agent answers and has elected itself leader.
# (Captured rather than piped into grep -q, whose early exit would fail
# curl's write under pipefail.)
consul_ready() {
	local self leader
	self=$(curl -sf "http://$consul_addr/v1/agent/self") &&
		grep -q "\"NodeName\": *\"$consul_node\"" <<<"$self" &&
		leader=$(curl -sf "http://$consul_addr/v1/status/leader") &&
		[[ $leader == *:* ]]
}
discovery=false
if consul=$(scripts/consul.sh 2>"$work/consul-build.log"); then
	discovery=true
	rm -rf "$work/consul-data"
	# Consul 1.15's dev mode binds gRPC on 8502 and gRPC-TLS on 8503 unless
	# told otherwise; the demo needs neither.
	"$consul" agent -dev -node "$consul_node" -bind 127.0.0.1 -client 127.0.0.1 \
		-http-port 18500 -grpc-port -1 -grpc-tls-port -1 -dns-port -1 \
		-serf-lan-port 18301 -serf-wan-port 18302 -server-port 18300 \
		-data-dir "$work/consul-data" >"$work/consul.log" 2>&1 &
	pids+=($!)
	wait_for "the demo's Consul agent" $! "$work/consul.log" 150 consul_ready
else
	echo "(Consul could not be built, see $work/consul-build.log: the demo runs with static backends)"
fi

# backend_ready LOG: the backend listens and, with discovery, has
# registered itself in the demo's Consul agent.
backend_ready() {
	if $discovery; then
		grep -q '"msg":"registered in consul"' "$1"
	else
		grep -q '"msg":"listening"' "$1"
	fi
}
for i in 1 2 3; do
	args=(-listen "127.0.0.1:900$i" -id "backend-$i")
	$discovery && args+=(-consul "$consul_addr" -service demo)
	bin/edge-backend "${args[@]}" 2>"$work/backend-$i.log" &
	pids+=($!)
	wait_for "backend-$i" $! "$work/backend-$i.log" 50 backend_ready "$work/backend-$i.log"
done

if $discovery; then
	pool="    consul: {service: demo}
    health: {type: websocket, interval: 2s}"
	reg="consul: {address: \"$consul_addr\", register: {enabled: true}}"
	# The fleet's ticket keys are sealed in Consul KV with a key every
	# edge host holds in a file (32 random bytes, hex).
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/ticket-seal.key")
	tickets="      session_tickets: {consul_key: edge/ticket-keys, consul_seal_key_file: ticket-seal.key}"
else
	pool="    backends:
      - {id: backend-1, address: 127.0.0.1:9001}
      - {id: backend-2, address: 127.0.0.1:9002}
      - {id: backend-3, address: 127.0.0.1:9003}"
	reg=""
	tickets=""
fi
cat >"$work/edge.yaml" <<YAML
# Demo configuration written by scripts/demo.sh.
admin: {address: 127.0.0.1:9901}
state_dir: state
listeners:
  - name: wss
    address: 127.0.0.1:8443
    tls:
      certificates: [{cert_file: cert.pem, key_file: key.pem}]
$tickets
  - name: ws
    address: 127.0.0.1:8080
routes:
  - {default: true, pool: demo}
pools:
  - name: demo
    balance: cookie
    cookie: {secret_file: cookie-secret}
$pool
$reg
YAML

bin/edge -config "$work/edge.yaml" 2>"$work/edge.log" &
pids+=($!)
# edge_answers: edge is ready and reaches a backend (discovery and the
# first health probes take a moment).
edge_answers() {
	curl -sf http://127.0.0.1:9901/readyz >/dev/null && bin/wsclient -insecure wss://127.0.0.1:8443/ >/dev/null 2>&1
}
wait_for "edge (answering a WebSocket on wss://127.0.0.1:8443/)" $! "$work/edge.log" 150 edge_answers

cat <<TXT

edge is running:  wss://127.0.0.1:8443/  and  ws://127.0.0.1:8080/   (admin: http://127.0.0.1:9901)

Try, in another terminal:
  bin/wsclient -n 5 -insecure wss://127.0.0.1:8443/             # which backend answered; the cookie keeps you there
  bin/wsclient -n 5 -no-cookies ws://127.0.0.1:8080/            # without the cookie, least-connections spreads you
  bin/wsclient -msg headers -insecure wss://127.0.0.1:8443/     # X-Forwarded-* as the backend saw them
  curl -s http://127.0.0.1:9901/status                         # pools, backends, TLS and discovery state
  open http://127.0.0.1:9901/ in a browser                      # the status page (refreshes itself)
  curl -s http://127.0.0.1:9901/api/v1/pools                   # the admin API (docs/OPERATIONS.md)
  curl -s http://127.0.0.1:9901/metrics | grep ^edge_
TXT
$discovery && cat <<TXT
  curl -s -X PUT http://$consul_addr/v1/agent/service/maintenance/demo-9002?enable=true   # edge stops sending clients to backend-2
  curl -s http://$consul_addr/v1/kv/edge/ticket-keys?raw        # the session-ticket keys a fleet of edges would share
TXT
echo
echo "logs in $work; Ctrl-C stops everything."
bin/wsclient -n 3 -insecure wss://127.0.0.1:8443/ || true
# EDGE_DEMO_CHECK=1 (the suite's TestDemo): stop here, after both listeners
# answered a WebSocket, instead of running until Ctrl-C.
if [ "${EDGE_DEMO_CHECK:-}" = 1 ]; then
	bin/wsclient -n 1 -insecure wss://127.0.0.1:8443/ && bin/wsclient -n 1 ws://127.0.0.1:8080/
	exit
fi
wait

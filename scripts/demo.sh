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

consul_addr=127.0.0.1:18500
discovery=false
if consul=$(scripts/consul.sh 2>"$work/consul-build.log"); then
	discovery=true
	rm -rf "$work/consul-data"
	"$consul" agent -dev -bind 127.0.0.1 -client 127.0.0.1 -http-port 18500 -grpc-port -1 \
		-dns-port -1 -serf-lan-port 18301 -serf-wan-port 18302 -server-port 18300 \
		-data-dir "$work/consul-data" >"$work/consul.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 100); do
		curl -sf "http://$consul_addr/v1/status/leader" | grep -q . && break
		sleep 0.1
	done
else
	echo "(Consul could not be built, see $work/consul-build.log: the demo runs with static backends)"
fi

for i in 1 2 3; do
	args=(-listen "127.0.0.1:900$i" -id "backend-$i")
	$discovery && args+=(-consul "$consul_addr" -service demo)
	bin/edge-backend "${args[@]}" 2>>"$work/backends.log" &
	pids+=($!)
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
edge_pid=$!
pids+=($edge_pid)
# Wait until edge is ready and can reach a backend (discovery and the first
# health probes take a moment); say why and stop if it cannot.
up=false
for _ in $(seq 1 150); do
	if ! kill -0 "$edge_pid" 2>/dev/null; then
		echo "edge exited; its log ($work/edge.log):" >&2
		tail -20 "$work/edge.log" >&2
		exit 1
	fi
	if curl -sf http://127.0.0.1:9901/readyz >/dev/null && bin/wsclient -insecure wss://127.0.0.1:8443/ >/dev/null 2>&1; then
		up=true
		break
	fi
	sleep 0.2
done
if ! $up; then
	echo "edge did not answer a WebSocket on wss://127.0.0.1:8443/ within 30 s; its log ($work/edge.log):" >&2
	tail -20 "$work/edge.log" >&2
	exit 1
fi

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

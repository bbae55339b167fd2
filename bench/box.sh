#!/usr/bin/env bash
# The full box: 100,000 idle wss connections over as many edge processes as
# the descriptor limit needs (SO_REUSEPORT), 1 % of them echoing once a
# second, then HAProxy with as many processes; a reconnect storm after
# SIGKILL of every process, and edge -upgrade of every edge. See
# bench/README.md ("The full box").
#
#   bench/box.sh                                   # 100,000 connections, edge then HAProxy
#   bench/box.sh -conns 10000 -proxies edge        # a check of the setup
#   EDGE_BIN=bin/edge bench/box.sh                 # measure a given edge binary
#
# Every flag is passed to bench/cmd/box (bench/out/bin/box -h lists them).
# The run stops itself after -timeout (40 minutes by default) and stops
# every process it started, also on Ctrl-C.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
out=bench/out
mkdir -p "$out/bin"

log() { printf 'box: %s\n' "$*" >&2; }

if ! command -v haproxy >/dev/null; then
	log "installing haproxy"
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y haproxy
fi

pid=
snap=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ -n "$snap" ]; then
		rm -rf "$snap"
	fi
}
trap cleanup EXIT INT TERM

log "building"
(cd bench && go build -o "$root/$out/bin/loadgen" ./loadgen)
(cd bench && go build -o "$root/$out/bin/box" ./cmd/box)
# edge and the echo backend from the last commit, so that the result names
# the code it measured.
edge=${EDGE_BIN:-}
backend="$out/bin/box-edge-backend"
rev=$(git rev-parse --short HEAD)
snap=$(mktemp -d)
git archive HEAD | tar -x -C "$snap"
(cd "$snap" && go build -o "$root/$backend" ./cmd/edge-backend)
if [ -z "$edge" ]; then
	edge="$out/bin/box-edge"
	(cd "$snap" && go build -ldflags "-X main.version=git-$rev" -o "$root/$edge" ./cmd/edge)
fi

"$out/bin/box" -edge-bin "$edge" -backend-bin "$backend" -loadgen-bin "$out/bin/loadgen" -out "$out" "$@" &
pid=$!
status=0
wait "$pid" || status=$?
pid=
log "done (exit $status); results in $root/$out/box-*.json"
exit "$status"

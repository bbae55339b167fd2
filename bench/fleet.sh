#!/usr/bin/env bash
# Holds 50,000 wss connections with a fleet of edge processes sharing one
# port (SO_REUSEPORT), measures their memory and writes docs/FLEET.md. See
# bench/README.md.
#
#   bench/fleet.sh                                 # 7 edges, 50,000 connections
#   bench/fleet.sh -edges 6 -conns 45000 -settle 60s
#   EDGE_BIN=bin/edge bench/fleet.sh               # measure a given edge binary
#
# Every flag is passed to bench/cmd/fleet (bench/out/bin/fleet -h lists them).
# The run stops itself after -timeout (20 minutes by default) and stops every
# process it started, also on Ctrl-C.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
out=bench/out
mkdir -p "$out/bin"

log() { printf 'fleet: %s\n' "$*" >&2; }

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
# The benchmark's tools are a module of their own (bench/go.mod); edge and
# its echo backend come from the parent module.
(cd bench && go build -o "$root/$out/bin/loadgen" ./loadgen)
(cd bench && go build -o "$root/$out/bin/fleet" ./cmd/fleet)
edge=${EDGE_BIN:-}
backend="$out/bin/fleet-edge-backend"
# edge and the echo backend are built from the last commit rather than the
# working tree, so that the report names exactly the code it measured even
# while uncommitted changes are under way.
rev=$(git rev-parse --short HEAD)
snap=$(mktemp -d)
git archive HEAD | tar -x -C "$snap"
(cd "$snap" && go build -o "$root/$backend" ./cmd/edge-backend)
if [ -z "$edge" ]; then
	edge="$out/bin/fleet-edge"
	(cd "$snap" && go build -ldflags "-X main.version=git-$rev" -o "$root/$edge" ./cmd/edge)
fi

# The published report comes from a run with the defaults; any other run
# writes its report under bench/out unless it passes -md itself.
md=docs/FLEET.md
if [ $# -gt 0 ]; then
	md="$out/FLEET-last.md"
fi

"$out/bin/fleet" -edge-bin "$edge" -backend-bin "$backend" -loadgen-bin "$out/bin/loadgen" \
	-out "$out" -md "$md" -command "bench/fleet.sh${*:+ $*}" "$@" &
pid=$!
status=0
wait "$pid" || status=$?
pid=
log "done (exit $status); results in $root/$out/fleet-*.json"
exit "$status"

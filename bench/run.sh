#!/usr/bin/env bash
# Runs the edge / HAProxy / nginx benchmark end to end. See bench/README.md.
#
#   bench/run.sh                      # full run, 3 repeats, writes docs/BENCHMARKS.md
#   bench/run.sh -quick               # small counts, short windows, 1 repeat
#   bench/run.sh -proxies haproxy,nginx -phases idle,echo -repeats 5
#
# Every flag is passed to bench/cmd/benchrun (bench/out/bin/benchrun -h lists
# them). EDGE_BIN names the edge binary; by default cmd/edge is built into
# bench/out/bin/edge, and bin/edge is used if that build fails.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
out=bench/out
mkdir -p "$out/bin"

log() { printf 'bench: %s\n' "$*" >&2; }

# The anchors come from Debian packages. Their packages may start system
# services; the benchmark runs its own instances, so stop those.
if ! command -v haproxy >/dev/null || ! command -v nginx >/dev/null; then
	log "installing haproxy and nginx"
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y haproxy nginx
fi
for svc in haproxy nginx; do
	if command -v systemctl >/dev/null && systemctl is-active --quiet "$svc" 2>/dev/null; then
		systemctl stop "$svc" || true
	elif [ -x "/etc/init.d/$svc" ] && "/etc/init.d/$svc" status >/dev/null 2>&1; then
		"/etc/init.d/$svc" stop || true
	fi
done

log "building"
# The benchmark's tools are a module of their own (bench/go.mod); edge and
# its echo backend come from the parent module.
(cd bench && go build -o "$root/$out/bin/loadgen" ./loadgen)
(cd bench && go build -o "$root/$out/bin/benchrun" ./cmd/benchrun)
(cd bench && go build -o "$root/$out/bin/windowbits" ./cmd/windowbits)
# The repository's echo backend, the same one the tests and the demo use.
go build -o "$out/bin/edge-backend" ./cmd/edge-backend
backend="$out/bin/edge-backend"
edge=${EDGE_BIN:-}
if [ -z "$edge" ]; then
	if go build -o "$out/bin/edge" ./cmd/edge 2>"$out/edge-build.log"; then
		edge="$out/bin/edge"
	elif [ -x bin/edge ]; then
		log "cmd/edge does not build (see $out/edge-build.log); using bin/edge"
		edge=bin/edge
	else
		log "no edge binary (see $out/edge-build.log); edge is skipped"
		edge="$out/bin/edge-missing"
	fi
fi

# Stop every child of the orchestrator, even on Ctrl-C; benchrun also stops
# its children itself and they die with it (PR_SET_PDEATHSIG).
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
}
trap cleanup EXIT INT TERM

# A quick run checks the setup; it does not replace the published table.
md=docs/BENCHMARKS.md
for a in "$@"; do
	case "$a" in -quick | --quick | -quick=true | --quick=true) md="$out/BENCHMARKS-quick.md" ;; esac
done

# The orchestrator shares the load core: the proxy's core runs nothing else.
taskset -c 1 "$out/bin/benchrun" \
	-edge-bin "$edge" -backend-bin "$backend" -loadgen-bin "$out/bin/loadgen" \
	-out "$out" -md "$md" -command "bench/run.sh${*:+ $*}" "$@" &
pid=$!
status=0
wait "$pid" || status=$?
pid=
log "done (exit $status); results in $root/$out/latest.json"
exit "$status"

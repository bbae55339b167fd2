#!/bin/sh
# consul.sh builds the Consul agent used by edge's tests and demo, once per
# machine, and prints the path of the binary.
#
# No Debian package ships Consul; its last MPL-2.0 release, v1.15.4, builds
# from the Go module proxy through the pinned module in deploy/consul-build
# (its own go.mod, so it never joins the edge module's ./...). The binary is
# cached under ${XDG_CACHE_HOME:-$HOME/.cache}/edge/consul-1.15.4/consul and
# rebuilt only when missing. A cold build takes about 4 minutes on 2 cores.
#
# Usage: scripts/consul.sh            # build if missing, print the path
#        EDGE_CONSUL_BIN=$(scripts/consul.sh) go test ./discovery ./health
set -eu

version=1.15.4
root=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/edge/consul-$version
bin=$cache/consul

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp "$cache/consul.XXXXXX")
trap 'rm -f "$tmp"' EXIT INT TERM

echo "consul.sh: building consul v$version into $bin (a cold build takes minutes)" >&2
# A heartbeat on stderr (never stdout: callers read the path from it), so
# nobody waits minutes in silence.
(
	start=$(date +%s)
	while sleep 30; do
		echo "consul.sh: still building ($(( $(date +%s) - start )) s)" >&2
	done
) >&2 &
beat=$!
trap 'kill "$beat" 2>/dev/null; rm -f "$tmp"' EXIT INT TERM
# go.mod and go.sum are complete (go mod tidy covers every platform), so the
# build never rewrites them; GOWORK=off keeps a go.work out of it.
(
	cd "$root/deploy/consul-build"
	GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
		go build -trimpath -o "$tmp" github.com/hashicorp/consul
)
kill "$beat" 2>/dev/null || true
chmod 0755 "$tmp"
# rename is atomic: a concurrent run sees either no binary or a whole one.
mv -f "$tmp" "$bin"
trap - EXIT INT TERM
"$bin" version >&2
echo "$bin"

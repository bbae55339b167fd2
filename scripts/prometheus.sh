#!/bin/sh
# prometheus.sh builds the Prometheus server used by edge's monitoring tests,
# once per machine, and prints the path of the binary.
#
# Debian's prometheus package (2.42) is built without Consul service
# discovery, which the shipped deploy/prometheus/scrape.yml uses. Prometheus
# v3 (module version v0.316.0) builds from the Go module proxy through the
# pinned module in deploy/prometheus-build, with only the Consul discoverer
# (tags remove_all_sd,enable_consul_sd) and without the web UI assets (the
# tests use the HTTP API). The binary is cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/edge/prometheus-$version/prometheus and rebuilt
# only when missing. A cold build takes about 3 minutes on 2 cores.
set -eu

version=v0.316.0
root=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/edge/prometheus-$version
bin=$cache/prometheus

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp "$cache/prometheus.XXXXXX")

echo "prometheus.sh: building prometheus $version into $bin (a cold build takes minutes)" >&2
# A heartbeat on stderr (never stdout: callers read the path from it).
(
	start=$(date +%s)
	while sleep 30; do
		echo "prometheus.sh: still building ($(( $(date +%s) - start )) s)" >&2
	done
) >&2 &
beat=$!
trap 'kill "$beat" 2>/dev/null; rm -f "$tmp"' EXIT INT TERM
(
	cd "$root/deploy/prometheus-build"
	GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
		go build -trimpath -tags remove_all_sd,enable_consul_sd -o "$tmp" github.com/prometheus/prometheus/cmd/prometheus
)
kill "$beat" 2>/dev/null || true
chmod 0755 "$tmp"
# rename is atomic: a concurrent run sees either no binary or a whole one.
mv -f "$tmp" "$bin"
trap - EXIT INT TERM
"$bin" --version >&2
echo "$bin"

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
. "$root/scripts/cachedbuild.sh"
cached_build prometheus "$version" deploy/prometheus-build github.com/prometheus/prometheus/cmd/prometheus -tags remove_all_sd,enable_consul_sd

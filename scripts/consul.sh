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
#        EDGE_CONSUL_BIN=$(scripts/consul.sh) go test ./discovery ./fleet ./health
set -eu

version=1.15.4
root=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
. "$root/scripts/cachedbuild.sh"
cached_build consul "$version" deploy/consul-build github.com/hashicorp/consul

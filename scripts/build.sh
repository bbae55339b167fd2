#!/bin/sh
# Builds edge's commands stamped with the checkout's version and revision:
#   scripts/build.sh -o bin/ ./cmd/edge ./cmd/edge-backend ./cmd/wsclient
# Every argument goes to go build. The stamps come from git (git describe
# --always --dirty for the version, the commit hash for the revision) through
# -ldflags, so they do not depend on GOFLAGS or on the toolchain finding the
# repository; -buildvcs=auto also records the VCS state in the build info
# where it can, and does nothing where it cannot. EDGE_VERSION, when set,
# is the version stamp instead of git's (a release build, or a second
# binary to upgrade to in a test).
set -eu
cd "$(dirname "$0")/.."
version=${EDGE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || true)}
revision=$(git rev-parse HEAD 2>/dev/null || true)
exec go build -buildvcs=auto -ldflags "-X main.version=$version -X main.revision=$revision" "$@"

#!/usr/bin/env bash
# Runs every test of edge on this machine: installs what the tests need
# (openssl, iproute2's ss, a Consul agent built from the Go module proxy),
# then vet, staticcheck and the race-enabled test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

need=()
command -v openssl >/dev/null || need+=(openssl)
command -v ss >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

EDGE_CONSUL_BIN="$(scripts/consul.sh)"
export EDGE_CONSUL_BIN

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
echo "== go test -race"
go test -race -count=1 -timeout 15m ./...

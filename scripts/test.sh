#!/usr/bin/env bash
# Runs every test of edge on this machine: installs what the tests need
# (openssl, iproute2's ss, a Consul agent and a Prometheus server built from
# the Go module proxy),
# then vet, staticcheck and the race-enabled test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

# The real clients and tools the tests drive (internal/interop): a missing
# one fails the test here instead of skipping it.
need=()
command -v openssl >/dev/null || need+=(openssl)
command -v ss >/dev/null || need+=(iproute2)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v systemd-analyze >/dev/null || need+=(systemd)
/usr/bin/python3 -c 'import websockets' 2>/dev/null || need+=(python3-websockets)
/usr/bin/python3 -c 'import aiohttp' 2>/dev/null || need+=(python3-aiohttp)
/usr/bin/python3 -c 'import jwt' 2>/dev/null || need+=(python3-jwt)
command -v promtool >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
	echo "== installing ${need[*]} (Debian packages; a minute or two)"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ ! -d internal/interop/js/node_modules/ws ] || [ ! -d internal/interop/js/node_modules/playwright-core ] || [ ! -d internal/interop/js/node_modules/jose ]; then
	echo "== installing npm clients (ws, playwright-core, jose) into internal/interop/js"
	npm ci --prefix internal/interop/js --no-audit --no-fund --loglevel=error
fi
export EDGE_REQUIRE_INTEROP=1

echo "== consul (built once per machine from the Go module proxy; a cold build takes about 4 minutes)"
EDGE_CONSUL_BIN="$(scripts/consul.sh)"
export EDGE_CONSUL_BIN EDGE_REQUIRE_CONSUL=1

echo "== prometheus 3 with Consul service discovery (built once per machine from the Go module proxy; a cold build takes about 3 minutes)"
EDGE_PROMETHEUS_BIN="$(scripts/prometheus.sh)"
export EDGE_PROMETHEUS_BIN

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
(cd bench && go vet ./...)
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
(cd bench && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...)
echo "== go test -race (building the test binaries)"
go test -race -count=1 -run '^$' ./... >/dev/null
# One package at a time: proxy and cmd/edge each run hundreds of real
# connections, Node and Chromium clients and child processes in parallel
# tests; two of them at once on a small machine only measure the machine.
echo "== go test -race (one package at a time; about five minutes)"
go test -race -count=1 -p 1 -timeout 20m ./...
# bench/ is a module of its own (bench/go.mod): ./... above leaves it out.
echo "== go test -race (bench module)"
(cd bench && go test -race -count=1 -timeout 5m ./...)

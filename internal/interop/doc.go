// Package interop finds the third-party clients that edge's end-to-end tests
// drive: Node.js with the npm `ws` client, headless Chromium (driven through
// npm `playwright-core`), and Debian's python3 with `websockets`. A behaviour
// is proven when a client edge did not write sees it; edge's own Go clients
// share its assumptions.
//
// scripts/test.sh installs all of them and sets EDGE_REQUIRE_INTEROP=1, so
// there a missing client fails the test. Elsewhere (a bare `go test`) a test
// whose client is missing is skipped and says what to install.
package interop

package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// required reports whether a missing client fails the test instead of
// skipping it.
func required() bool { return os.Getenv("EDGE_REQUIRE_INTEROP") == "1" }

func missing(t testing.TB, what string) {
	t.Helper()
	if required() {
		t.Fatalf("%s is missing (EDGE_REQUIRE_INTEROP=1); scripts/test.sh installs it", what)
	}
	t.Skipf("%s is missing; scripts/test.sh installs it", what)
}

// JSDir returns the directory holding package.json and node_modules of the
// npm clients.
func JSDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "js")
}

// Node returns a command running the Node.js script at path (relative to
// the test's working directory or absolute) with args, able to require `ws`
// and `playwright-core`. The test is skipped (or fails under
// EDGE_REQUIRE_INTEROP=1) when Node or the npm packages are missing.
func Node(t testing.TB, ctx context.Context, script string, args ...string) *exec.Cmd {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node")
	}
	mods := filepath.Join(JSDir(), "node_modules")
	if _, err := os.Stat(filepath.Join(mods, "ws")); err != nil {
		missing(t, "npm package ws (npm ci --prefix internal/interop/js)")
	}
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	return cmd
}

// Chromium returns the path of Debian's chromium, for playwright-core's
// executablePath. The test is skipped (or fails) when it is missing.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("EDGE_CHROMIUM"), "/usr/bin/chromium"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	missing(t, "chromium")
	return ""
}

// Python returns a command running Debian's python3 (which has the
// `websockets` package from python3-websockets) on script with args. The
// system interpreter is named explicitly: a python3 earlier on PATH (pyenv,
// a virtualenv) does not see Debian's packages.
func Python(t testing.TB, ctx context.Context, script string, args ...string) *exec.Cmd {
	t.Helper()
	return PythonWith(t, ctx, "websockets", "python3-websockets", script, args...)
}

// PythonWith is Python for a script that needs the module from Debian's
// package pkg (aiohttp from python3-aiohttp, say).
func PythonWith(t testing.TB, ctx context.Context, module, pkg, script string, args ...string) *exec.Cmd {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.CommandContext(ctx, py, "-c", "import "+module).Run(); err != nil {
		missing(t, pkg)
	}
	return exec.CommandContext(ctx, py, append([]string{script}, args...)...)
}

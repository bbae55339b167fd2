package edge_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestCmdEdgeBuildsEverywhere cross-compiles cmd/edge for systems other
// than Linux, so that a Linux-only name in a file without a build
// constraint is caught here and not by whoever builds edge there. Those
// systems run the goroutine splice (proxy/splice_ready_other.go) and the
// per-system pieces of cmd/edge (sockopt_*.go, fdlimit_*.go, notify_*.go).
// It compiles and links only; nothing runs.
func TestCmdEdgeBuildsEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiling takes a while on a cold build cache")
	}
	for _, target := range []struct{ goos, goarch string }{
		{"windows", "amd64"},
		{"darwin", "arm64"},
		{"freebsd", "amd64"},
	} {
		t.Run(target.goos+"/"+target.goarch, func(t *testing.T) {
			cmd := exec.Command("go", "build", "-o", os.DevNull, "./cmd/edge")
			cmd.Env = append(os.Environ(), "GOOS="+target.goos, "GOARCH="+target.goarch, "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("GOOS=%s GOARCH=%s go build ./cmd/edge: %v\n%s", target.goos, target.goarch, err, out)
			}
		})
	}
}

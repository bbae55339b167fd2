//go:build unix

package tls_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	edgetls "github.com/edgelb/edge/tls"
)

// TestOCSPPersistedStapleNotEdges: a staple in state_dir that another
// user owns (uid 65534: planted, or swapped in for edge's) is not
// served after a restart; edge says which file and why, and the
// responder's fresh answer replaces it with a file of edge's.
func TestOCSPPersistedStapleNotEdges(t *testing.T) {
	p, port, l := ocspSetup(t, leafOpts{})
	r := startResponder(t, p, port, indexLine(l.cert, time.Time{}), "", "")
	stateDir := t.TempDir()
	opts := edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, StateDir: stateDir}
	start(t, opts)
	r.stop()
	files, _ := filepath.Glob(filepath.Join(stateDir, "ocsp-*.der"))
	if len(files) != 1 {
		t.Fatalf("persisted staples: got %q, want one file", files)
	}
	if err := os.Chown(files[0], 65534, 65534); err != nil {
		t.Skipf("chown to uid 65534: %v (not root)", err)
	}

	e := start(t, opts)
	if got, want := stapleStatus(t, mustDial(t, e.addr, p.client("a.example.com")), l, p), "none"; got != want {
		t.Errorf("another user's staple after restart: staple %s, want %s", got, want)
	}
	if !strings.Contains(e.logs.String(), "cannot read persisted OCSP staple") || e.logs.count("owned by uid 65534") == 0 || e.logs.count(files[0]) == 0 {
		t.Errorf("log lacks the refused staple, its file and owner:\n%s", e.logs.String())
	}

	startResponder(t, p, port, indexLine(l.cert, time.Time{}), "", "")
	e.term.RefreshOCSP(context.Background())
	if got, want := stapleStatus(t, mustDial(t, e.addr, p.client("a.example.com")), l, p), "good"; got != want {
		t.Errorf("after a refresh: staple %s, want %s", got, want)
	}
	fi, err := os.Lstat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() || fi.Mode() != 0o600 {
		t.Errorf("staple rewritten: uid %d, mode %v; want edge's, 0600", uid, fi.Mode())
	}
}

//go:build linux

package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The two accounts of TestAdminAccessByUser: edge runs as edgeUID; otherUID
// is any other local user.
const (
	edgeUID  = 65534
	otherUID = 65533
)

// asUser runs name with args as uid (and the same gid, no supplementary
// groups) through util-linux's setpriv; it needs root.
func asUser(uid int, name string, args ...string) *exec.Cmd {
	id := strconv.Itoa(uid)
	return exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", name}, args...)...)
}

// needRoot skips a test that must switch users.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run edge and its clients as other users")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
}

// curlAs is curl's status for one request to the admin listener, run as
// uid; hdr are extra -H arguments.
func curlAs(t *testing.T, uid int, method, url string, hdr ...string) string {
	t.Helper()
	args := []string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30", "-X", method}
	if method == "POST" {
		args = append(args, "-H", "Content-Type: application/json", "-d", "{}")
	}
	for _, h := range hdr {
		args = append(args, "-H", h)
	}
	out, err := asUser(uid, "curl", append(args, url)...).Output()
	if err != nil {
		t.Fatalf("curl as %d %s %s: %v", uid, method, url, err)
	}
	return string(out)
}

// TestAdminAccessByUser: a default install (no token in the file, a
// state_dir) with edge running as its own user: another local user reads
// /status and the API on loopback, but every write and the upgrade are
// refused to it, through curl and through edge -upgrade; a read that names
// a foreign Host (DNS rebinding) is refused too; edge's own user upgrades
// with one command, which reads the token edge generated (mode 0600).
func TestAdminAccessByUser(t *testing.T) {
	needRoot(t)
	s := newSetup(t, backends(t, "b1"), "least_conn", "")
	// Everything the edge user needs is its own; the binary and the file
	// may be read by everybody, as in a package install.
	for _, d := range []string{filepath.Dir(edgeBin), filepath.Dir(s.dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(s.dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, edgeUID, edgeUID)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEdgeCmd(t, asUser(edgeUID, edgeBin, "-config", s.cfg))
	pid := p.cmd.Process.Pid
	// A process an upgrade started is not the test's child, and holds its
	// log pipe: end it before the test waits for the first one.
	t.Cleanup(func() {
		if st := statusOf(s.admin); st.PID != 0 && st.PID != pid {
			if proc, err := os.FindProcess(st.PID); err == nil {
				_ = proc.Kill()
			}
		}
	})
	tok := filepath.Join(s.dir, "state", "admin.token")
	fi, err := os.Stat(tok)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != edgeUID {
		t.Fatalf("%s: mode %v owner %d, want 0600 and edge's user", tok, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid)
	}
	admin := "http://" + s.admin
	for _, path := range []string{"/status", "/", "/api/v1/pools", "/api/v1/pools/app/backends/b1/connections", "/metrics", "/readyz"} {
		if got := curlAs(t, otherUID, "GET", admin+path); got != "200" {
			t.Errorf("another user, GET %s: %s, want 200", path, got)
		}
		if got := curlAs(t, otherUID, "GET", admin+path, "Host: rebound.attacker.example"); got != "421" {
			t.Errorf("another user, GET %s with a foreign Host: %s, want 421", path, got)
		}
	}
	for _, path := range []string{"/api/v1/pools/app/backends/b1/disable", "/api/v1/pools/app/backends/b1/drain", "/api/v1/upgrade"} {
		if got := curlAs(t, otherUID, "POST", admin+path); got != "401" {
			t.Errorf("another user, POST %s: %s, want 401", path, got)
		}
	}
	out, err := asUser(otherUID, edgeBin, "-upgrade", "-config", s.cfg).CombinedOutput()
	// Refused at edge's files, which are not this user's: the key file's
	// directory (internal/trust) or the token itself.
	if err == nil || !strings.Contains(string(out), "permission denied") && !strings.Contains(string(out), "not edge's") {
		t.Errorf("another user, edge -upgrade: %v %q; want a refusal (the token is not theirs to read)", err, out)
	}
	if st := statusOf(s.admin); st.PID != pid {
		t.Fatalf("after the refused upgrades /status says pid %d, want %d", st.PID, pid)
	}
	if b := s.statusBackend(t, "app", "b1"); b["admin_state"] != "ready" {
		t.Errorf("after the refused writes b1 is %v, want ready", b["admin_state"])
	}

	out, err = asUser(edgeUID, edgeBin, "-upgrade", "-config", s.cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "upgraded to") {
		t.Fatalf("edge's user, edge -upgrade: %v\n%s", err, out)
	}
	waitFor(t, "the new process to answer", func() bool {
		st := statusOf(s.admin)
		return st.PID != 0 && st.PID != pid
	})
	// The new process keeps the generated token: the same file works.
	if got := curlAs(t, edgeUID, "POST", admin+"/api/v1/pools/app/backends/b1/enable", "Authorization: Bearer "+s.token(t)); got != "200" {
		t.Errorf("edge's user, POST enable with the token after the upgrade: %s, want 200", got)
	}
}

// TestUpgradeClientKeepsTheTokenOnThisHost: edge -upgrade refuses to send
// the token over plain HTTP to an address that is not this host's, before
// connecting, and says how to reach a remote edge instead.
func TestUpgradeClientKeepsTheTokenOnThisHost(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	// 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never this host's.
	writeFile(t, cfg, "admin: {address: \"192.0.2.1:9901\", allow_public: true, api: {token_env: EDGE_TEST_TOKEN}}\n"+
		"upgrade: {timeout: 1s}\nlisteners:\n  - {name: ws, address: \"127.0.0.1:0\"}\nroutes:\n  - {default: true, pool: app}\n"+
		"pools:\n  - name: app\n    backends:\n      - {id: b1, address: \"127.0.0.1:1\"}\n")
	cmd := exec.Command(edgeBin, "-upgrade", "-config", cfg)
	cmd.Env = append(os.Environ(), "EDGE_TEST_TOKEN=token-0123456789abcdef")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to send the admin token") || !strings.Contains(string(out), "ssh") {
		t.Errorf("edge -upgrade to 192.0.2.1: %v %q; want a refusal that names ssh", err, out)
	}
	t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), out)
}

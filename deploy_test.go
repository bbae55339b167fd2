package edge_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/edgelb/edge/internal/consultest"
)

// TestSystemdUnitSandboxed keeps deploy/edge.service sandboxed: systemd's
// own scorer must rate it 2.0 or better (lower is safer; a unit with no
// sandboxing scores 9.6). systemd-analyze works offline, so the test runs
// wherever the systemd package is installed, even without systemd as PID 1.
func TestSystemdUnitSandboxed(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd)")
	}
	unit, err := filepath.Abs("deploy/edge.service")
	if err != nil {
		t.Fatal(err)
	}
	// --threshold is in tenths: 20 means exposure 2.0.
	out, err := exec.Command(sa, "security", "--offline=yes", "--threshold=20", unit).CombinedOutput()
	overall := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "Overall exposure level") {
			overall = l
		}
	}
	if err != nil || overall == "" {
		t.Fatalf("systemd-analyze security rates the unit above 2.0 (%v): %s\n%s", err, overall, out)
	}
	t.Log(strings.TrimSpace(overall))
}

// TestSystemdUnitReloadChecksFirst: a reload runs `edge -check` before the
// SIGHUP, so systemctl reload fails for a file edge would refuse instead of
// reporting success; and the stop timeout leaves the default drain (30 s)
// room to finish.
func TestSystemdUnitReloadChecksFirst(t *testing.T) {
	b, err := os.ReadFile("deploy/edge.service")
	if err != nil {
		t.Fatal(err)
	}
	var reloads []string
	stop := 0
	notify := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "ExecReload="):
			reloads = append(reloads, strings.TrimPrefix(l, "ExecReload="))
		case strings.HasPrefix(l, "TimeoutStopSec="):
			stop, _ = strconv.Atoi(strings.TrimPrefix(l, "TimeoutStopSec="))
		case l == "Type=notify":
			notify = true
		}
	}
	if len(reloads) != 2 || !strings.Contains(reloads[0], "-check") || !strings.Contains(reloads[1], "-HUP") {
		t.Errorf("ExecReload lines %q, want edge -check then kill -HUP", reloads)
	}
	if stop <= 30 {
		t.Errorf("TimeoutStopSec=%d, want more than the default drain timeout of 30 s", stop)
	}
	if !notify {
		t.Error("unit is not Type=notify: systemd cannot tell when edge is ready")
	}
}

// TestSystemdUnitUpgrade: after an upgrade the new process sends MAINPID=
// before it is the main process, which systemd accepts only with
// NotifyAccess=all; the unit says how to upgrade; and a stop reaches an old
// process still draining as well (SIGTERM to the whole group), so it is not
// killed half-way when the new main process exits.
func TestSystemdUnitUpgrade(t *testing.T) {
	b, err := os.ReadFile("deploy/edge.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"\nNotifyAccess=all\n", "\nKillMode=control-group\n", "edge -upgrade -config /etc/edge/edge.yaml", "-s USR2 edge"} {
		if !strings.Contains(unit, want) {
			t.Errorf("deploy/edge.service lacks %q", strings.TrimSpace(want))
		}
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		path, err := filepath.Abs("deploy/edge.service")
		if err != nil {
			t.Fatal(err)
		}
		// verify checks every setting's syntax; the binaries it names are
		// not installed here, which is all it may complain about.
		out, _ := exec.Command(sa, "verify", "--man=no", path).CombinedOutput()
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" && !strings.Contains(l, "/usr/local/bin/edge") && !strings.Contains(l, "edge.service: Command") {
				t.Errorf("systemd-analyze verify: %s", l)
			}
		}
	}
}

// TestSysctlFile checks deploy/99-edge.conf against this kernel: every key
// exists (a typo is silently ignored by `sysctl --system` with -e), and the
// ephemeral port range stays clear of the ports edge and Consul listen on.
func TestSysctlFile(t *testing.T) {
	f, err := os.Open("deploy/99-edge.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("line %d: %q is not key = value", n, line)
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if _, err := os.Stat("/proc/sys/" + strings.ReplaceAll(key, ".", "/")); err != nil {
			t.Errorf("line %d: %s is not a sysctl of this kernel: %v", n, key, err)
		}
		if key == "net.ipv4.ip_local_port_range" {
			lo, _ := strconv.Atoi(strings.Fields(val)[0])
			for _, port := range []int{443, 8080, 8300, 8301, 8302, 8500, 8501, 8502, 8503, 8600, 9901} {
				if port >= lo {
					t.Errorf("line %d: ephemeral ports from %d include port %d that edge or Consul listens on", n, lo, port)
				}
			}
		}
	}
}

// TestAlertRules runs promtool on the shipped alert rules: they parse, and
// deploy/prometheus/alerts_test.yml (every alert, firing and not firing)
// passes.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("EDGE_REQUIRE_INTEROP") == "1" {
			t.Fatal("promtool is missing (Debian package prometheus); scripts/test.sh installs it")
		}
		t.Skip("promtool is missing (Debian package prometheus)")
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "deploy/prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestConsulServiceDefinition validates deploy/consul/edge.hcl with the
// real agent's `consul validate`, next to the one setting a full agent
// configuration needs (data_dir).
func TestConsulServiceDefinition(t *testing.T) {
	bin := consultest.Bin()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("EDGE_REQUIRE_CONSUL") == "1" {
			t.Fatalf("consul binary %s: %v", bin, err)
		}
		t.Skipf("consul binary %s: %v; scripts/consul.sh builds it", bin, err)
	}
	dir := t.TempDir()
	def, err := os.ReadFile("deploy/consul/edge.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "edge.hcl"), def, 0o600); err != nil {
		t.Fatal(err)
	}
	agent := "data_dir = \"" + filepath.Join(dir, "data") + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, "agent.hcl"), []byte(agent), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "validate", dir).CombinedOutput(); err != nil {
		t.Fatalf("consul validate: %v\n%s", err, out)
	}
	for _, want := range []string{`name = "edge"`, `name = "edge-metrics"`, "/readyz", "/healthz"} {
		if !strings.Contains(string(def), want) {
			t.Errorf("deploy/consul/edge.hcl lacks %s", want)
		}
	}
}

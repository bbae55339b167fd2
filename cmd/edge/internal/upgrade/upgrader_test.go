//go:build !windows

package upgrade

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// The tests start this test binary as the new process: TestMain plays the
// role named in roleEnv instead of running the tests.
const (
	roleEnv = "UPGRADE_TEST_ROLE"
	addrEnv = "UPGRADE_TEST_ADDR"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(playRole(role))
	}
	os.Exit(m.Run())
}

// report is what a new process started by a test tells it over the
// listener it inherited.
type report struct {
	Args     []string `json:"args"`
	Dir      string   `json:"dir"`
	Explicit string   `json:"explicit"`
	Leaked   string   `json:"leaked"`
	Sentinel string   `json:"sentinel"`
	Parent   bool     `json:"parent"`
	Handoff  string   `json:"handoff"`
	State    string   `json:"state"`
}

// playRole is the new process's side: "exit" fails before it is ready,
// "hang" never becomes ready, "serve" takes the inherited listener and
// hand-off socket and reports on one connection, "origin" is a first
// process that upgrades to a "successor", which reports while its parent
// drains and again once it has exited.
func playRole(role string) int {
	switch role {
	case "exit":
		return 3
	case "hang":
		select {}
	case "serve":
		return serveRole()
	case "origin":
		return originRole()
	case "successor":
		return successorRole()
	}
	return 2
}

// notBound is the bind of a process that must inherit its listener.
func notBound(addr string) (net.Listener, error) {
	return nil, fmt.Errorf("%s was not inherited", addr)
}

func serveRole() int {
	u := New(Options{})
	ln, err := u.Listen(os.Getenv(addrEnv), notBound)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h, err := u.InheritedHandoff()
	if err != nil || h == nil {
		fmt.Fprintln(os.Stderr, "hand-off socket:", h, err)
		return 1
	}
	if err := u.Ready(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	line, _ := bufio.NewReader(h).ReadString('\n')
	wd, _ := os.Getwd()
	r := report{Args: os.Args, Dir: wd, Explicit: os.Getenv("UPGRADE_TEST_EXPLICIT"), Leaked: os.Getenv("UPGRADE_TEST_LEAK"),
		Sentinel: os.Getenv(sentinelEnv), Parent: u.HasParent(), Handoff: strings.TrimSpace(line), State: u.State()}
	return answer(ln, r)
}

// answer writes r on the next connection ln accepts.
func answer(ln net.Listener, r report) int {
	c, err := ln.Accept()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(r); err != nil {
		return 1
	}
	return 0
}

func originRole() int {
	exe, _ := os.Executable()
	u := New(Options{Child: Child{Path: exe, Env: []string{roleEnv + "=successor", addrEnv + "=" + os.Getenv(addrEnv)}}, Timeout: time.Minute})
	ln, err := u.Listen(os.Getenv(addrEnv), func(a string) (net.Listener, error) { return net.Listen("tcp", a) })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := u.Ready(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := u.Upgrade("", "test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = ln.Close()
	fmt.Println("upgraded")
	// Drains until the test says so.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func successorRole() int {
	u := New(Options{})
	ln, err := u.Listen(os.Getenv(addrEnv), notBound)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := u.Ready(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if code := answer(ln, report{Parent: u.HasParent(), State: u.State()}); code != 0 {
		return code
	}
	<-u.parent.gone
	return answer(ln, report{Parent: u.HasParent(), State: u.State()})
}

// self is the test binary as a Child playing role.
func self(t *testing.T, role string, env ...string) Child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Child{Path: exe, Env: append([]string{roleEnv + "=" + role}, env...)}
}

// serving is an Upgrader of this test process that serves one listener.
func serving(t *testing.T, opts Options) (*Upgrader, net.Listener) {
	t.Helper()
	u := New(opts)
	t.Cleanup(u.Stop)
	ln, err := u.Listen(testkit.ClosedPort(t), func(a string) (net.Listener, error) { return net.Listen("tcp", a) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	if err := u.Ready(); err != nil {
		t.Fatal(err)
	}
	return u, ln
}

// readReport dials addr and reads the report of the process that accepts.
func readReport(t *testing.T, addr string) report {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var r report
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		t.Fatalf("report from the new process: %v", err)
	}
	return r
}

// TestUpgradePassesWhatItIsGiven: the new process runs the given path
// with the given arguments, environment and directory, nothing of this
// process's own environment, and takes over the listener and the hand-off
// socket; the old one's copies are closed once it took over.
func TestUpgradePassesWhatItIsGiven(t *testing.T) {
	t.Setenv("UPGRADE_TEST_LEAK", "from the old process's environment")
	dir := t.TempDir()
	var u *Upgrader
	var ln net.Listener
	c := self(t, "serve", "UPGRADE_TEST_EXPLICIT=given", sentinelEnv+"=stale")
	c.Args = []string{"-test.run=^$", "marker"}
	c.Dir = dir
	u, ln = serving(t, Options{Child: c, Timeout: time.Minute})
	c.Env = append(c.Env, addrEnv+"="+ln.Addr().String())
	u.opts.Child = c
	if err := u.Upgrade("", "test"); err != nil {
		t.Fatal(err)
	}
	if got := u.State(); got != "handed over, draining" {
		t.Errorf("state after the upgrade: %q", got)
	}
	if err := u.Upgrade("", "test"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "already handed over") {
		t.Errorf("a second upgrade: %v, want a refusal", err)
	}
	if _, err := fmt.Fprintln(u.Handoff(), "through the hand-off socket"); err != nil {
		t.Fatal(err)
	}
	_ = ln.Close() // as edge stops accepting: the queue is the new process's
	r := readReport(t, ln.Addr().String())
	if want := []string{c.Path, "-test.run=^$", "marker"}; strings.Join(r.Args, " ") != strings.Join(want, " ") {
		t.Errorf("new process's arguments %q, want %q", r.Args, want)
	}
	if r.Dir != dir {
		t.Errorf("new process's directory %q, want %q", r.Dir, dir)
	}
	if r.Explicit != "given" || r.Leaked != "" {
		t.Errorf("new process's environment: given %q, leaked %q; want the given one only", r.Explicit, r.Leaked)
	}
	if r.Sentinel != "" || !r.Parent {
		t.Errorf("new process: sentinel %q left in its environment, has parent %v", r.Sentinel, r.Parent)
	}
	if r.Handoff != "through the hand-off socket" {
		t.Errorf("hand-off socket carried %q", r.Handoff)
	}
	if r.State != "the process this one replaced (pid "+fmt.Sprint(os.Getpid())+") is still draining" {
		t.Errorf("new process's state while this one lives: %q", r.State)
	}
	u.files.mu.Lock()
	defer u.files.mu.Unlock()
	if len(u.files.passed) != 0 {
		t.Errorf("copies kept after the hand-over: %v", u.files.passed)
	}
}

// TestUpgradeRefusesUntilServing: a process that has not told its parent
// (or, without one, not started) that it serves refuses an upgrade, so a
// new process still waiting to become ready never starts a third one.
func TestUpgradeRefusesUntilServing(t *testing.T) {
	u := New(Options{Child: self(t, "exit")})
	defer u.Stop()
	if err := u.Upgrade("", "test"); !errors.Is(err, ErrRefused) {
		t.Fatalf("upgrade before serving: got %v, want a refusal", err)
	}
	if got := u.State(); got != "this process is not serving yet" {
		t.Errorf("state before serving: %q", got)
	}
}

// openFDs lists what this process's open descriptors are, sorted, with
// the inode of sockets and pipes left out: a failed attempt gets a fresh
// hand-off pair in place of the old one.
func openFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory ReadDir read, closed since
		}
		kind, _, _ := strings.Cut(target, ":[")
		out = append(out, kind)
	}
	sort.Strings(out)
	return out
}

// TestFailedUpgradeLeavesNothing: a new process that exits, or is not
// ready in time, fails the upgrade with the reason; this process keeps
// its sockets and may upgrade again, and holds exactly the descriptors it
// held before, with the collector off, so no finalizer closed them.
func TestFailedUpgradeLeavesNothing(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	u, ln := serving(t, Options{Timeout: 300 * time.Millisecond})
	before := openFDs(t)
	// Only the hanging child waits for the bound; the others get one a
	// loaded machine cannot reach, so "exit" is never seen as "timed out".
	for _, tc := range []struct {
		role, reason string
		timeout      time.Duration
	}{
		{"exit", "exited before it was ready: exit status 3", 10 * time.Minute},
		{"hang", "timed out: not ready within 300ms", 300 * time.Millisecond},
		{"missing", "no such file", 10 * time.Minute},
	} {
		c := self(t, tc.role)
		if tc.role == "missing" {
			c.Path = t.TempDir() + "/edge"
		}
		u.opts.Child, u.opts.Timeout = c, tc.timeout
		err := u.Upgrade("", "test")
		if err == nil || errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), "keeps serving") {
			t.Errorf("%s: %v, want a failure saying %q", tc.role, err, tc.reason)
		}
		if got := u.State(); got != "ready" {
			t.Errorf("%s: state after the failure %q, want ready", tc.role, got)
		}
		if after := openFDs(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Errorf("%s: descriptors after the failure:\n%s\nbefore:\n%s", tc.role, strings.Join(after, "\n"), strings.Join(before, "\n"))
		}
	}
	// The listener still serves.
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("listener after the failures: %v", err)
	}
	_ = c.Close()
}

// TestUpgradeOneAtATime: while a new process is awaited a second upgrade
// is refused, and Stop ends the one under way, killing its process.
func TestUpgradeOneAtATime(t *testing.T) {
	u, _ := serving(t, Options{Child: self(t, "hang"), Timeout: 10 * time.Minute})
	first := make(chan error, 1)
	go func() { first <- u.Upgrade("", "test") }()
	testkit.WaitFor(t, "the first upgrade under way", func() bool { return u.State() == "in progress" })
	if err := u.Upgrade("", "test"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "already in progress") {
		t.Errorf("a second upgrade: %v, want a refusal", err)
	}
	u.Stop()
	if err := <-first; !errors.Is(err, errStopped) {
		t.Errorf("the upgrade Stop interrupted: %v", err)
	}
	if err := u.Upgrade("", "test"); !errors.Is(err, ErrRefused) {
		t.Errorf("an upgrade after Stop: %v, want a refusal", err)
	}
}

// TestSuccessorWaitsForItsParent: a process an upgrade started refuses
// to upgrade while its parent drains, and may once the parent has exited,
// which it learns from the pipe the kernel closes.
func TestSuccessorWaitsForItsParent(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := testkit.ClosedPort(t)
	origin := exec.Command(exe)
	origin.Env = append(os.Environ(), roleEnv+"=origin", addrEnv+"="+addr)
	stdin, err := origin.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := origin.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	origin.Stderr = os.Stderr
	if err := origin.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = origin.Process.Kill(); _ = origin.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "upgraded\n" {
		t.Fatalf("origin: %q, %v", line, err)
	}
	r := readReport(t, addr)
	if want := fmt.Sprintf("the process this one replaced (pid %d) is still draining", origin.Process.Pid); !r.Parent || r.State != want {
		t.Errorf("successor while its parent drains: parent %v, state %q; want %q", r.Parent, r.State, want)
	}
	_ = stdin.Close()
	if err := origin.Wait(); err != nil {
		t.Errorf("origin exited with %v", err)
	}
	if r := readReport(t, addr); r.State != "ready" {
		t.Errorf("successor once its parent exited: state %q, want ready", r.State)
	}
}

// TestNilUpgrader: an edge built without one (tests building it in
// process) binds its own sockets and refuses upgrades.
func TestNilUpgrader(t *testing.T) {
	var u *Upgrader
	if err := u.Upgrade("", "test"); !errors.Is(err, ErrRefused) {
		t.Errorf("upgrade: %v, want a refusal", err)
	}
	ln, err := u.Listen("127.0.0.1:0", func(a string) (net.Listener, error) { return net.Listen("tcp", a) })
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
	if err := u.Ready(); err != nil || u.HasParent() || u.Handoff() != nil || u.HandedOff() != nil {
		t.Errorf("a nil Upgrader: ready %v, parent %v, hand-off %v", err, u.HasParent(), u.Handoff())
	}
	u.Stop()
}

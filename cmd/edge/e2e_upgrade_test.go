package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"

	"github.com/gorilla/websocket"
)

// upProc is an edge started from its own path, which the test may replace
// with another binary, logging to a file: its successors inherit stdout and
// stderr, and a pipe would keep the first process's Wait from returning
// until the last successor is gone.
type upProc struct {
	cmd     *exec.Cmd
	bin     string // the path edge was started as
	logPath string
	done    chan error
}

// logs is everything the process and its successors wrote.
func (p *upProc) logs(t *testing.T) string {
	t.Helper()
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// startUpgradable starts edge from a link to the tests' binary in the
// setup's directory, waits until it serves and kills, at the test's end,
// every process that served.
func startUpgradable(t *testing.T, s *setup, env ...string) *upProc {
	t.Helper()
	p := &upProc{bin: filepath.Join(s.dir, "edge"), logPath: filepath.Join(s.dir, "edge.log"), done: make(chan error, 1)}
	installBinary(t, edgeBin, p.bin)
	lf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	p.cmd = exec.Command(p.bin, "-config", s.cfg)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		for _, pid := range startedPIDs(p.logs(t)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("edge log:\n%s", p.logs(t))
		}
	})
	waitFor(t, "edge serves", func() bool { return statusOf(s.admin).PID == p.cmd.Process.Pid })
	// The admin listener answers a moment before the process counts as
	// serving for upgrades (it tells its parent, if any, then).
	waitFor(t, "edge ready to upgrade", func() bool { return statusField(t, s.admin, "upgrade") == "ready" })
	return p
}

// waitExit waits up to bound for the first process to exit, and fails
// the test unless it exited 0 (an old process that handed everything
// over).
func (p *upProc) waitExit(t *testing.T, bound time.Duration) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("old process exited with %v, want 0", err)
		}
	case <-time.After(bound):
		t.Fatal("old process did not exit")
	}
}

// startedPIDs lists the pid of every "edge started" line of a log.
func startedPIDs(log string) []int {
	var out []int
	for _, l := range strings.Split(log, "\n") {
		var m struct {
			Msg string `json:"msg"`
			PID int    `json:"pid"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "edge started" && m.PID != 0 {
			out = append(out, m.PID)
		}
	}
	return out
}

// installBinary puts src at dst the way a package upgrade does: written
// beside it, then renamed over it, so a running process keeps its file.
func installBinary(t *testing.T, src, dst string) {
	t.Helper()
	tmp := dst + ".new"
	_ = os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		b, rerr := os.ReadFile(src)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err := os.WriteFile(tmp, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// installScript puts a shell script at dst, as installBinary does.
func installScript(t *testing.T, dst, body string) {
	t.Helper()
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noKeepAlive is a client whose every request opens its own connection:
// one kept alive would stay with the process that accepted it.
var noKeepAlive = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

type statusInfo struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	Active  int    `json:"active_connections"`
}

// statusOf is the admin /status of whichever process answers; zero when
// none does.
func statusOf(admin string) statusInfo {
	var st statusInfo
	resp, err := noKeepAlive.Get("http://" + admin + "/status")
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st
}

// sampleOf reads one sample from the admin /metrics; -1 when absent.
func sampleOf(t *testing.T, admin, series string) float64 {
	t.Helper()
	resp, err := noKeepAlive.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// postUpgrade asks for an upgrade through the admin API, with the token
// edge generated.
func postUpgrade(t *testing.T, s *setup, body string) (int, string) {
	t.Helper()
	return postUpgradeAs(t, s.admin, "Bearer "+s.token(t), body)
}

// postUpgradeAs asks for an upgrade with the given Authorization ("" for
// none).
func postUpgradeAs(t *testing.T, admin, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+admin+"/api/v1/upgrade", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST /api/v1/upgrade: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// gone reports whether pid has exited: no such process, or a zombie that
// nobody has reaped yet (the test's PID 1 may not reap orphans).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// openFDs counts the descriptors of pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// fdTargets lists what the descriptors of pid point at.
func fdTargets(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out = append(out, e.Name()+" "+l)
	}
	return out
}

// echoOnce opens a WebSocket, has one message echoed and closes it.
func echoOnce(d *websocket.Dialer, url string) error {
	c, _, err := d.Dial(url, nil)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte("probe")); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	_, b, err := c.ReadMessage()
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if string(b) != "probe" {
		return fmt.Errorf("echo %q", b)
	}
	return nil
}

// prober opens a new connection every 20 ms, a WebSocket with one echo
// through the public listener and a GET /healthz on the admin listener,
// and records every failure, until stopped.
type prober struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	stop       context.CancelFunc
	done       chan struct{}
}

func startProber(s *setup) *prober {
	ctx, cancel := context.WithCancel(context.Background())
	p := &prober{stop: cancel, done: make(chan struct{})}
	d := &websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A WebSocket the old process opened moves with the others:
			// a close frame before its echo is a failure like any other.
			err := echoOnce(d, "ws://"+s.ws+"/")
			if err == nil {
				err = adminHealthy(s.admin)
			}
			if err != nil {
				p.failed.Add(1)
				p.mu.Lock()
				p.errs = append(p.errs, err.Error())
				p.mu.Unlock()
				continue
			}
			p.ok.Add(1)
		}
	}()
	return p
}

// adminHealthy is a GET /healthz on a fresh connection.
func adminHealthy(admin string) error {
	resp, err := noKeepAlive.Get("http://" + admin + "/healthz")
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin /healthz: %d", resp.StatusCode)
	}
	return nil
}

// finish stops the prober after n more successful probes and returns its
// failures.
func (p *prober) finish(t *testing.T, n int64) []string {
	t.Helper()
	target := p.ok.Load() + n
	waitFor(t, "probes after the upgrade", func() bool { return p.ok.Load() >= target || p.failed.Load() > 0 })
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs
}

// httpStorm sends plain GET /whoami through the ws listener back to back
// from several clients, each on a new connection: requests that reach the
// old process in its last moments must be answered, and none may be
// refused.
type httpStorm struct {
	stop context.CancelFunc
	wg   sync.WaitGroup
	n    atomic.Int64
	mu   sync.Mutex
	errs []string
}

func startHTTPStorm(s *setup, clients int) *httpStorm {
	ctx, cancel := context.WithCancel(context.Background())
	h := &httpStorm{stop: cancel}
	for range clients {
		h.wg.Go(func() {
			for ctx.Err() == nil {
				h.n.Add(1)
				resp, err := noKeepAlive.Get("http://" + s.ws + "/whoami")
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					h.mu.Lock()
					h.errs = append(h.errs, time.Now().Format("15:04:05.000000")+" "+err.Error())
					h.mu.Unlock()
				}
			}
		})
	}
	return h
}

// finish stops the clients and returns how many requests were sent and
// the failures.
func (h *httpStorm) finish() (int64, []string) {
	h.stop()
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n.Load(), h.errs
}

var (
	nextBinOnce sync.Once
	nextBin     string
	nextBinErr  error
)

// nextVersion is the version stamped on the second binary.
const nextVersion = "v99.0.0-next"

// nextBinary is edge built again by scripts/build.sh with another version
// stamp (EDGE_VERSION): the release an upgrade moves to.
func nextBinary(t *testing.T) string {
	t.Helper()
	nextBinOnce.Do(func() {
		nextBin = filepath.Join(filepath.Dir(edgeBin), "edge-next")
		cmd := exec.Command("../../scripts/build.sh", "-race", "-o", nextBin, "./cmd/edge")
		cmd.Env = append(os.Environ(), "EDGE_VERSION="+nextVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			nextBinErr = fmt.Errorf("build: %w\n%s", err, out)
		}
	})
	if nextBinErr != nil {
		t.Fatal(nextBinErr)
	}
	return nextBin
}

// TestUpgradeHandsOverListeners: a new binary put at edge's path and
// `edge -upgrade` replace the running process while a prober opening a new
// WebSocket (and an admin request) every 20 ms never fails; the new
// process serves with its own version, and the old one exits 0.
func TestUpgradeHandsOverListeners(t *testing.T) {
	next := nextBinary(t)
	s := newSetup(t, backends(t, "b1"), "least_conn", "")
	p := startUpgradable(t, s)
	old := p.cmd.Process.Pid
	pr := startProber(s)
	waitFor(t, "probes before the upgrade", func() bool { return pr.ok.Load() >= 5 || pr.failed.Load() > 0 })

	storm := startHTTPStorm(s, 4)
	installBinary(t, next, p.bin)
	out, err := exec.Command(edgeBin, "-upgrade", "-config", s.cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("edge -upgrade: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "version "+nextVersion) {
		t.Errorf("edge -upgrade printed %q, want the new version %s", out, nextVersion)
	}
	st := statusOf(s.admin)
	if st.PID == old || st.Version != nextVersion {
		t.Errorf("after the upgrade /status says pid %d version %q, want a new pid with %s", st.PID, st.Version, nextVersion)
	}
	p.waitExit(t, 30*time.Second)
	if n, errs := storm.finish(); len(errs) > 0 {
		t.Errorf("%d of %d back-to-back plain requests failed during the upgrade: %q", len(errs), n, errs)
	} else {
		t.Logf("%d back-to-back plain requests, none failed", n)
	}
	if errs := pr.finish(t, 25); len(errs) > 0 {
		t.Errorf("%d of %d probes failed during the upgrade: %q", len(errs), int64(len(errs))+pr.ok.Load(), errs)
	}
	t.Logf("%d probes, none failed", pr.ok.Load())
	// The inherited socket kept SO_REUSEPORT: another socket may bind
	// the port beside it (and is closed at once).
	if ln, err := listenReusePort(s.ws); err != nil {
		t.Errorf("the new process's listener lost SO_REUSEPORT: %v", err)
	} else {
		ln.Close()
	}
	if m := metricsText(t, s.admin); !strings.Contains(grepLines(m, "edge_build_info{"), `version="`+nextVersion+`"} 1`) {
		t.Errorf("edge_build_info of the new process: %s, want version %s", grepLines(m, "edge_build_info{"), nextVersion)
	}
}

// metricsText is the admin /metrics of whichever process answers.
func metricsText(t *testing.T, admin string) string {
	t.Helper()
	resp, err := noKeepAlive.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestUpgradeToBrokenBinaryKeepsServing: a binary that exits at once, and
// one that starts but never becomes ready (bounded by upgrade.timeout),
// leave the running process serving on every listener, with the reason in
// the API's answer and edge_upgrades_total{result="failed"}; the failed
// attempts leave no descriptor behind.
func TestUpgradeToBrokenBinaryKeepsServing(t *testing.T) {
	s := newSetup(t, backends(t, "b1"), "least_conn", "upgrade: {timeout: 2s}\n")
	p := startUpgradable(t, s)
	pid := p.cmd.Process.Pid
	// A first WebSocket on each listener, so what the proxy sets up once
	// (its pollers) is in the count before the upgrades.
	for _, u := range []string{"ws://" + s.ws + "/", "wss://" + s.wss + "/"} {
		if err := echoOnce(s.dialer(), u); err != nil {
			t.Fatal(err)
		}
	}
	// Counted once the proxy holds no connection, like the count after.
	waitFor(t, "no live connection", func() bool { return statusOf(s.admin).Active == 0 })
	// Once two counts agree: the admin connection that asked is closing.
	settled(func() float64 { return float64(openFDs(t, pid)) })
	before := fdTargets(t, pid)
	for i, tc := range []struct{ name, script, reason string }{
		{"exits", "exit 1", "exit status 1"},
		{"never ready", "exec sleep 600", "timed out"},
	} {
		installScript(t, p.bin, tc.script)
		code, body := postUpgrade(t, s, "")
		if code != http.StatusInternalServerError || !strings.Contains(body, tc.reason) || !strings.Contains(body, "keeps serving") {
			t.Errorf("%s: got %d %s, want 500 saying %q and that edge keeps serving", tc.name, code, body, tc.reason)
		}
		if st := statusOf(s.admin); st.PID != pid {
			t.Fatalf("%s: /status answered by pid %d, want the running %d", tc.name, st.PID, pid)
		}
		if err := echoOnce(s.dialer(), "ws://"+s.ws+"/"); err != nil {
			t.Errorf("%s: ws listener after the failed upgrade: %v", tc.name, err)
		}
		if err := echoOnce(s.dialer(), "wss://"+s.wss+"/"); err != nil {
			t.Errorf("%s: wss listener after the failed upgrade: %v", tc.name, err)
		}
		if got := sampleOf(t, s.admin, `edge_upgrades_total{result="failed"}`); got != float64(i+1) {
			t.Errorf("%s: edge_upgrades_total{result=\"failed\"} = %v, want %d", tc.name, got, i+1)
		}
	}
	// edge -upgrade says why, and exits non-zero.
	installScript(t, p.bin, "exit 1")
	out, err := exec.Command(edgeBin, "-upgrade", "-config", s.cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "exit status 1") {
		t.Errorf("edge -upgrade to a binary that exits: %v, output %q; want a failure naming the exit status", err, out)
	}
	// A named binary must be absolute, and needs the token: without it
	// any local user could have edge run a program of theirs.
	if code, answer := postUpgrade(t, s, `{"binary": "edge"}`); code != http.StatusBadRequest {
		t.Errorf(`upgrade with {"binary": "edge"}: got %d %s, want 400`, code, answer)
	}
	if code, answer := postUpgradeAs(t, s.admin, "", `{"binary": "/bin/true"}`); code != http.StatusUnauthorized {
		t.Errorf(`upgrade with {"binary": "/bin/true"} and no token: got %d %s, want 401`, code, answer)
	}
	if st := statusOf(s.admin); st.PID != pid {
		t.Fatalf("/status answered by pid %d, want the running %d", st.PID, pid)
	}
	// Like for like: the same process, nothing open but what it had.
	waitFor(t, "no live connection", func() bool { return statusOf(s.admin).Active == 0 })
	deadline := time.Now().Add(30 * time.Second)
	for openFDs(t, pid) > len(before) { // no leak: back to at most what it had
		if time.Now().After(deadline) {
			t.Fatalf("descriptors after the failed upgrades:\n%v\nbefore:\n%v", fdTargets(t, pid), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUpgradeRefusedWhileOneRuns: a second request while an upgrade waits
// for its new process is refused with 409, as is a SIGUSR2; and a process
// whose predecessor still drains refuses too, so old processes never pile
// up.
func TestUpgradeRefusedWhileOneRuns(t *testing.T) {
	s := newSetup(t, backends(t, "b1"), "least_conn", "upgrade: {timeout: 3s}\n")
	p := startUpgradable(t, s)
	installScript(t, p.bin, "exec sleep 600")
	first := make(chan int, 1)
	go func() {
		code, _ := postUpgrade(t, s, "")
		first <- code
	}()
	waitFor(t, "the first upgrade to start", func() bool {
		return strings.Contains(p.logs(t), "upgrade: starting the new process")
	})
	code, body := postUpgrade(t, s, "")
	if code != http.StatusConflict || !strings.Contains(body, "already in progress") {
		t.Errorf("second upgrade: got %d %s, want 409 already in progress", code, body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGUSR2 refused", func() bool { return sampleOf(t, s.admin, `edge_upgrades_total{result="refused"}`) == 2 })
	if got := <-first; got != http.StatusInternalServerError {
		t.Errorf("first upgrade: got %d, want 500 (the new process never became ready)", got)
	}

	// A WebSocket that never answers the close frame keeps the old
	// process draining until drain.timeout; meanwhile its successor
	// refuses to upgrade.
	installBinary(t, edgeBin, p.bin)
	raw := rawWebSocket(t, s.ws)
	defer raw.Close()
	if code, body := postUpgrade(t, s, ""); code != http.StatusOK {
		t.Fatalf("upgrade: got %d %s", code, body)
	}
	waitFor(t, "the new process serving", func() bool {
		st := statusOf(s.admin)
		return st.PID != 0 && st.PID != p.cmd.Process.Pid && statusField(t, s.admin, "upgrade") != "this process is not serving yet"
	})
	code, body = postUpgrade(t, s, "")
	if code != http.StatusConflict || !strings.Contains(body, "still draining") {
		t.Errorf("upgrade while the old process drains: got %d %s, want 409 still draining", code, body)
	}
}

// rawWebSocket opens a WebSocket with a bare TCP client through the ws
// listener and returns the connection after the 101.
func rawWebSocket(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if br.Buffered() > 0 {
		t.Fatalf("bytes after the 101: %d", br.Buffered())
	}
	_ = c.SetDeadline(time.Time{})
	return c
}

// liveEchoer is one WebSocket echoing numbered messages at a steady pace
// (pacing only: nothing waits on it), checking that each answer is the
// message it sent, in order.
type liveEchoer struct {
	c    *websocket.Conn
	n    atomic.Int64 // messages answered
	err  atomic.Pointer[error]
	stop chan struct{}
	done chan struct{}
}

func (e *liveEchoer) run(id int, pace time.Duration) {
	defer close(e.done)
	fail := func(err error) { e.err.Store(&err) }
	for seq := 0; ; seq++ {
		select {
		case <-e.stop:
			return
		case <-time.After(pace):
		}
		msg := fmt.Sprintf("c%d-%d", id, seq)
		_ = e.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_ = e.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if err := e.c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			fail(fmt.Errorf("message %d: write: %w", seq, err))
			return
		}
		_, got, err := e.c.ReadMessage()
		if err != nil {
			fail(fmt.Errorf("message %d: read: %w", seq, err))
			return
		}
		if string(got) != msg {
			fail(fmt.Errorf("message %d: got %q, want %q", seq, got, msg))
			return
		}
		e.n.Add(1)
	}
}

// startEchoers opens n WebSockets to url, each echoing every pace.
func startEchoers(t *testing.T, d *websocket.Dialer, url string, n int, pace time.Duration) []*liveEchoer {
	t.Helper()
	es := make([]*liveEchoer, n)
	for i := range es {
		c, _, err := d.Dial(url, nil)
		if err != nil {
			t.Fatalf("dial %d of %d: %v", i, n, err)
		}
		es[i] = &liveEchoer{c: c, stop: make(chan struct{}), done: make(chan struct{})}
		go es[i].run(i, pace)
	}
	t.Cleanup(func() {
		for _, e := range es {
			select {
			case <-e.stop:
			default:
				close(e.stop)
			}
			<-e.done
			e.c.Close()
		}
	})
	return es
}

// answered is the number of messages each echoer got back so far.
func answered(es []*liveEchoer) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.n.Load()
	}
	return out
}

// allPast reports whether every echoer answered more than base[i]+k
// messages, failing the test on the first that broke.
func allPast(t *testing.T, es []*liveEchoer, base []int64, k int64) bool {
	t.Helper()
	for i, e := range es {
		if p := e.err.Load(); p != nil {
			t.Fatalf("WebSocket %d: %v", i, *p)
		}
		if e.n.Load() < base[i]+k {
			return false
		}
	}
	return true
}

// TestUpgradeKeepsLiveWebSockets: 1,000 plain and 1,000 TLS 1.3
// WebSockets echo numbered messages across an upgrade to a new binary:
// every message is answered, in order, none is closed, and afterwards
// they echo through the new process while the old one is gone. A prober
// opening a new WebSocket every 20 ms never fails meanwhile. TLS 1.2
// WebSockets, whose records stay with crypto/tls and cannot move, get a
// close frame 1012, never a bare TCP close.
func TestUpgradeKeepsLiveWebSockets(t *testing.T) {
	const n = 1000
	const pace = 500 * time.Millisecond
	next := nextBinary(t)
	s := newSetup(t, backends(t, "b1", "b2"), "least_conn", "")
	p := startUpgradable(t, s)
	old := p.cmd.Process.Pid
	plain := startEchoers(t, &websocket.Dialer{HandshakeTimeout: 10 * time.Second}, "ws://"+s.ws+"/", n, pace)
	tls13 := startEchoers(t, s.dialer(), "wss://"+s.wss+"/", n, pace)
	d12 := s.dialer()
	d12.TLSClientConfig.MaxVersion = tls.VersionTLS12
	const k12 = 5
	codes := make(chan error, k12)
	for range k12 {
		c, _, err := d12.Dial("wss://"+s.wss+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, _, err := c.ReadMessage()
			codes <- err
		}()
	}
	all := append(append([]*liveEchoer(nil), plain...), tls13...)
	base := answered(all)
	waitFor(t, "every WebSocket echoing", func() bool { return allPast(t, all, base, 2) })
	pr := startProber(s)
	waitFor(t, "probes before the upgrade", func() bool { return pr.ok.Load() >= 5 || pr.failed.Load() > 0 })

	installBinary(t, next, p.bin)
	start := time.Now()
	out, err := exec.Command(edgeBin, "-upgrade", "-config", s.cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("edge -upgrade: %v\n%s", err, out)
	}
	p.waitExit(t, 60*time.Second)
	t.Logf("upgrade with %d live WebSockets: the old process was gone %v after edge -upgrade began", 2*n+k12, time.Since(start).Round(time.Millisecond))
	if st := statusOf(s.admin); st.PID == old || st.Version != nextVersion {
		t.Errorf("after the upgrade /status says pid %d version %q, want a new pid with %s", st.PID, st.Version, nextVersion)
	}
	after := answered(all)
	waitFor(t, "every WebSocket echoing through the new process", func() bool { return allPast(t, all, after, 2) })
	for range k12 {
		err := <-codes
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseServiceRestart {
			t.Errorf("TLS 1.2 WebSocket at the upgrade: %v, want a close frame 1012", err)
		}
	}
	if errs := pr.finish(t, 10); len(errs) > 0 {
		t.Errorf("%d of %d probes failed during the upgrade: %q", len(errs), int64(len(errs))+pr.ok.Load(), errs)
	}
	// The old process's last words: every plain and TLS 1.3 WebSocket
	// moved, the TLS 1.2 ones closed.
	if want := fmt.Sprintf(`"moved":%d,"closed":%d`, 2*n, k12); !strings.Contains(p.logs(t), want) {
		t.Errorf("the old process's log has no %s: %s", want, grepLines(p.logs(t), `"msg":"drained"`))
	}
}

// TestUpgradeNotifiesMainPID: under a service manager the new process
// sends MAINPID=<its pid> with READY=1, so the unit's main PID follows it;
// the old process does not say STOPPING=1 (the service is not stopping);
// and a stop of the new process still drains with STOPPING=1.
func TestUpgradeNotifiesMainPID(t *testing.T) {
	s := newSetup(t, backends(t, "b1"), "least_conn", "")
	sd := newSDSocket(t)
	p := startUpgradable(t, s, "NOTIFY_SOCKET="+sd.path)
	if msg := sd.next(t); !hasLine(msg, "READY=1") {
		t.Fatalf("first message %q, want READY=1", msg)
	}
	if err := p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	msg := sd.next(t)
	var st statusInfo
	waitFor(t, "the new process", func() bool { st = statusOf(s.admin); return st.PID != 0 && st.PID != p.cmd.Process.Pid })
	if !hasLine(msg, fmt.Sprintf("MAINPID=%d", st.PID)) || !hasLine(msg, "READY=1") {
		t.Errorf("message at the upgrade %q, want MAINPID=%d and READY=1", msg, st.PID)
	}
	<-p.done
	p.done <- nil
	_ = sd.c.SetReadDeadline(time.Now())
	buf := make([]byte, 4096)
	if n, err := sd.c.Read(buf); err == nil {
		t.Errorf("after the old process exited, a message %q; want none until the stop", buf[:n])
	}
	if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := sd.next(t); !hasLine(msg, "STOPPING=1") {
		t.Errorf("on SIGTERM to the new process got %q, want STOPPING=1", msg)
	}
}

// TestTenUpgradesLeakNothing: ten upgrades in a row, each once the last
// old process has exited; every new process, once alone, holds as many
// descriptors and goroutines as the first one did.
func TestTenUpgradesLeakNothing(t *testing.T) {
	s := newSetup(t, backends(t, "b1"), "least_conn", "")
	p := startUpgradable(t, s)
	prev := p.cmd.Process.Pid
	var baseFDs int
	var baseGoroutines float64
	var baseList []string
	for i := range 10 {
		if code, body := postUpgrade(t, s, ""); code != http.StatusOK {
			t.Fatalf("upgrade %d: got %d %s", i+1, code, body)
		}
		var st statusInfo
		waitFor(t, "the new process", func() bool { st = statusOf(s.admin); return st.PID != 0 && st.PID != prev })
		waitFor(t, "the old process to exit", func() bool { return gone(prev) })
		if i == 0 {
			if err := <-p.done; err != nil {
				t.Errorf("first process exited with %v, want 0", err)
			}
			p.done <- nil
		}
		// The new process learns its parent is gone through a pipe; until
		// then it refuses upgrades, which is what is waited for here.
		waitFor(t, "the new process ready to upgrade", func() bool { return statusField(t, s.admin, "upgrade") == "ready" })
		// tableflip closes that pipe, and its goroutine ends, just after
		// saying so: the first count is taken once two in a row agree.
		fds := settled(func() float64 { return float64(openFDs(t, st.PID)) })
		g := settled(func() float64 { return sampleOf(t, s.admin, "go_goroutines") })
		if i == 0 {
			baseFDs, baseGoroutines = int(fds), g
			baseList = fdTargets(t, st.PID)
		} else {
			deadline := time.Now().Add(30 * time.Second)
			// No leak: back to at most what the first had (a connection
			// of the first's count may have been on its way out).
			for openFDs(t, st.PID) > baseFDs {
				if time.Now().After(deadline) {
					t.Fatalf("upgrade %d: descriptors %v, want at most %d as after the first:\n%s\nthe first:\n%s", i+1, fds, baseFDs, strings.Join(fdTargets(t, st.PID), "\n"), strings.Join(baseList, "\n"))
				}
				time.Sleep(20 * time.Millisecond)
			}
			waitFor(t, fmt.Sprintf("upgrade %d: goroutines %v back to at most %v", i+1, g, baseGoroutines), func() bool { return sampleOf(t, s.admin, "go_goroutines") <= baseGoroutines })
		}
		prev = st.PID
	}
}

// settled reads f until two reads 50 ms apart agree, and returns that.
func settled(f func() float64) float64 {
	v := f()
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		w := f()
		if w == v {
			return v
		}
		v = w
	}
	return v
}

// statusField is one string field of the admin /status.
func statusField(t *testing.T, admin, name string) string {
	t.Helper()
	resp, err := noKeepAlive.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	v, _ := m[name].(string)
	return v
}

// TestUpgradeBindsAddedClosesRemovedListeners: the new process reads the
// file as it is now: a listener moved to another address is bound there,
// and the inherited socket of the old address is closed, not kept.
func TestUpgradeBindsAddedClosesRemovedListeners(t *testing.T) {
	s := newSetup(t, backends(t, "b1"), "least_conn", "")
	p := startUpgradable(t, s)
	moved := testkit.ClosedPort(t)
	writeFile(t, s.cfg, strings.Replace(readFile(t, s.cfg), fmt.Sprintf("address: %q\n", s.ws), fmt.Sprintf("address: %q\n", moved), 1))
	if code, body := postUpgrade(t, s, ""); code != http.StatusOK {
		t.Fatalf("upgrade: got %d %s", code, body)
	}
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("old process did not exit")
	}
	if err := echoOnce(s.dialer(), "ws://"+moved+"/"); err != nil {
		t.Errorf("listener at its new address: %v", err)
	}
	if err := echoOnce(s.dialer(), "wss://"+s.wss+"/"); err != nil {
		t.Errorf("the unchanged listener: %v", err)
	}
	if c, err := net.DialTimeout("tcp", s.ws, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("the old address %s still accepts: its inherited socket was kept", s.ws)
	}
}

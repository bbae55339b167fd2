package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
)

// fleetUpgradeSetup is an upgradable edge paced through agent's semaphore
// at edge/fleet, named id, waiting at most wait for a slot.
func fleetUpgradeSetup(t *testing.T, agent *consultest.Agent, id string, wait time.Duration) (*setup, *upProc) {
	t.Helper()
	s := newSetup(t, backends(t, "b1"), "least_conn", fmt.Sprintf(
		"upgrade: {timeout: 60s, fleet_concurrency: 1, fleet_wait: %s}\nconsul: {address: %q, fleet: {prefix: edge/fleet, id: %s}}\n", wait, agent.Addr, id))
	return s, startUpgradable(t, s)
}

// logTime is the time of the first line of log whose msg is msg.
func logTime(t *testing.T, log, msg string) time.Time {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		var m struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == msg {
			return m.Time
		}
	}
	t.Fatalf("no %q in the log:\n%s", msg, log)
	return time.Time{}
}

// TestFleetUpgradesOneAtATime, with a real Consul agent and three edges
// sharing upgrade.fleet_concurrency 1: while edge A hands off (its new
// process waits on a fifo the test opens), edge C's edge -upgrade says it
// waits, who holds the slot, and gives up at C's bound with C still
// serving; edge B's waits too and proceeds once A's hand-off is over,
// starting its new process only after A gave the slot back.
func TestFleetUpgradesOneAtATime(t *testing.T) {
	agent := consultest.Start(t)
	sA, pA := fleetUpgradeSetup(t, agent, "edge-a", time.Minute)
	sB, pB := fleetUpgradeSetup(t, agent, "edge-b", 2*time.Minute)
	sC, pC := fleetUpgradeSetup(t, agent, "edge-c", 3*time.Second)

	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A's new binary starts edge once the test writes the fifo.
	installScript(t, pA.bin, fmt.Sprintf("read line < %q\nexec %q \"$@\"", fifo, edgeBin))
	upA := make(chan string, 1)
	go func() {
		out, err := exec.Command(edgeBin, "-upgrade", "-config", sA.cfg).CombinedOutput()
		upA <- fmt.Sprintf("%v: %s", err, out)
	}()
	waitFor(t, "edge-a's new process started, holding the slot", func() bool {
		return strings.Contains(pA.logs(t), "upgrade: starting the new process")
	})

	out, err := exec.Command(edgeBin, "-upgrade", "-config", sC.cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "edge -upgrade: waiting for a fleet upgrade slot") ||
		!strings.Contains(string(out), "no fleet upgrade slot free within 3s: held by edge-a (pid ") {
		t.Errorf("edge-c's edge -upgrade while edge-a holds the slot: %v\n%s\nwant a wait naming edge-a, then a refusal at 3s", err, out)
	}
	if st := statusOf(sC.admin); st.PID != pC.cmd.Process.Pid {
		t.Errorf("edge-c after its refused upgrade: /status from pid %d, want %d", st.PID, pC.cmd.Process.Pid)
	}

	installBinary(t, edgeBin, pB.bin)
	clientB := exec.Command(edgeBin, "-upgrade", "-config", sB.cfg)
	clientB.Stderr = os.Stderr
	outB, err := clientB.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := clientB.Start(); err != nil {
		t.Fatal(err)
	}
	linesB := bufio.NewReader(outB)
	// What edge-b's edge -upgrade prints first is that it waits.
	if line, err := linesB.ReadString('\n'); err != nil || !strings.HasPrefix(line, "edge -upgrade: waiting for a fleet upgrade slot") || !strings.Contains(line, "held by edge-a (pid ") {
		t.Fatalf("edge-b's edge -upgrade while edge-a holds the slot: %q, %v; want a wait naming edge-a", line, err)
	}
	if st := statusField(t, sB.admin, "upgrade"); !strings.HasPrefix(st, "waiting for a fleet upgrade slot") {
		t.Errorf("edge-b's /status while it waits: upgrade %q", st)
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := <-upA; !strings.HasPrefix(got, "<nil>: edge: upgraded to") {
		t.Fatalf("edge-a's upgrade: %s", got)
	}
	rest, _ := io.ReadAll(linesB)
	if err := clientB.Wait(); err != nil || !strings.Contains(string(rest), "edge: upgraded to") {
		t.Fatalf("edge-b's upgrade once edge-a's hand-off is over: %v, %s", err, rest)
	}
	pA.waitExit(t, 30*time.Second)
	pB.waitExit(t, 30*time.Second)
	released := logTime(t, pA.logs(t), "upgrade: fleet upgrade slot given back")
	started := logTime(t, pB.logs(t), "upgrade: starting the new process")
	if started.Before(released) {
		t.Errorf("edge-b started its new process at %v, before edge-a gave the slot back at %v", started, released)
	}
	t.Logf("edge-b started %v after edge-a gave the slot back", started.Sub(released))
}

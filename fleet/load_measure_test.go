package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// TestFleetLoadHostileWriterCost measures what a writer of the fleet
// prefix costs an edge's follower: the CPU time and peak resident memory
// of this process (a Load following a real agent) over ~16 s idle,
// then over ~16 s while a writer (curl, a process of its own, so its work
// is not counted here) puts 32 keys of 512 KiB, Consul's largest value,
// without a session under PREFIX/edges/ and rewrites one of them every
// second. A third phase adds, for reference, a follower that lists the
// prefix's values as Load did before (a blocking KV List, every
// value decoded). It fails when the hostile phase costs more than 1.5
// times the idle one. Run it with
//
//	EDGE_MEASURE_FLEET=1 EDGE_CONSUL_BIN=$(scripts/consul.sh) \
//	  go test -count=1 -run TestFleetLoadHostileWriterCost -v ./fleet
//
// (no -race: the detector multiplies both figures). docs/BENCHMARKS.md
// has the figures.
func TestFleetLoadHostileWriterCost(t *testing.T) {
	if os.Getenv("EDGE_MEASURE_FLEET") != "1" {
		t.Skip("a measurement of ~50 s: set EDGE_MEASURE_FLEET=1")
	}
	agent := consultest.Start(t)
	dir := t.TempDir()
	// Printable garbage, no record; two of them, since Consul ignores a
	// write of the value a key already has.
	for v := range 2 {
		junk := make([]byte, 512<<10)
		for i := range junk {
			junk[i] = byte('!' + (i*7919+i/13+v)%90)
		}
		testkit.WriteFile(t, filepath.Join(dir, fmt.Sprint("value", v)), junk)
	}
	base := "http://" + agent.Addr + "/v1/kv/edge/edges/junk"
	put := func(key, value string) string {
		return fmt.Sprintf("curl -sf -X PUT --data-binary @%s/value%s %s%s >/dev/null || exit 1", dir, value, base, key)
	}
	// Every key written (with the value it does not have yet), then one
	// rewritten every second.
	hostile := `v=$(cat ` + dir + `/next 2>/dev/null || echo 0); echo $((1 - v)) > ` + dir + `/next; ` +
		"for i in $(seq 0 31); do " + put("$i", "$v") + "; done; " +
		"for s in $(seq 1 16); do sleep 1; " + put("$((s % 32))", "$((1 - v))") + "; done"
	idle := "sleep 17"

	// Edge's own timings, not the other tests' short ones.
	a := startFleetEdgeWith(t, LoadOptions{Client: boundedClient(t, agent.Addr), ID: "a", WaitTime: DefaultLoadWaitTime})
	a.active.Store(1)
	testkit.WaitFor(t, "the edge's own record", func() bool { return a.f.Snapshot().Total("app", "b1") == 1 && !a.f.Status().Stale })

	before := measureFleetPhase(t, a, idle)
	t.Logf("idle:    %s", before)
	during := measureFleetPhase(t, a, hostile)
	t.Logf("hostile: %s", during)
	if st := a.f.Status(); st.Unheld != 32 || a.f.Snapshot().Total("app", "b1") != 1 {
		t.Errorf("status %+v: want the 32 keys refused unread and the edge's record kept", st)
	}

	// The reference: a follower listing values, as Load did before.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		listFollower(ctx, agent.Client)
	}()
	listed := measureFleetPhase(t, a, hostile)
	cancel()
	<-done
	t.Logf("hostile, with a follower listing values: %s", listed)

	if during.cpu > before.cpu*3/2 || during.hwm > before.hwm*3/2 {
		t.Errorf("a hostile writer costs more than 1.5 times idle: %s against %s", during, before)
	}
}

// fleetPhase is what one phase cost this process.
type fleetPhase struct {
	wall    time.Duration
	cpu     time.Duration // user and system time of this process
	hwm     int64         // peak resident memory, bytes (VmHWM, reset at the start)
	fetches int64         // records Load read one by one
	wakeups int64         // answers of its keys query
}

func (p fleetPhase) String() string {
	return fmt.Sprintf("%.1f s: CPU %.3f s, peak RSS %.1f MiB, %d wake-ups, %d records read",
		p.wall.Seconds(), p.cpu.Seconds(), float64(p.hwm)/(1<<20), p.wakeups, p.fetches)
}

// measureFleetPhase runs script in sh (the writer, or a sleep) and
// returns what this process spent until it ended.
func measureFleetPhase(t *testing.T, e *testFleetEdge, script string) fleetPhase {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak RSS: %v", err)
	}
	st0, cpu0, start := e.f.Status(), selfCPU(t), time.Now()
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("writer: %v\n%s", err, out)
	}
	st1 := e.f.Status()
	return fleetPhase{
		wall: time.Since(start), cpu: selfCPU(t) - cpu0, hwm: selfHWM(t),
		fetches: st1.Fetches - st0.Fetches, wakeups: st1.Wakeups - st0.Wakeups,
	}
}

// listFollower follows edge/edges/ with blocking Lists, decoding every
// value: what Load's read did before it followed keys.
func listFollower(ctx context.Context, c *api.Client) {
	var index uint64
	for ctx.Err() == nil {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
		pairs, meta, err := c.KV().List("edge/edges/", q)
		if err != nil {
			continue
		}
		for _, p := range pairs {
			_, _ = DecodeRecord(p.Value, nil)
		}
		index = meta.LastIndex
	}
}

func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func selfHWM(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		if rest, ok := strings.CutPrefix(string(line), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

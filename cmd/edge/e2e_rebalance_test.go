package main

import (
	"bufio"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/interop"
)

// TestRebalanceAfterScaleOut: 20 Node ws clients on the only backend; a
// second backend is added by a reload; edge moves connections off the
// first, each with a close frame 1012, until both are within the
// tolerance, and every moved client that reconnects lands on the new one.
func TestRebalanceAfterScaleOut(t *testing.T) {
	bs := backends(t, "b1", "b2")
	const pool = "    rebalance: {enabled: true, tolerance: 0.1, settle: 1s, rate: 20, min_age: 0s}\n"
	s := newSetup(t, bs[:1], "least_conn", pool)
	p := startEdge(t, s.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := interop.Node(t, ctx, filepath.Join("testdata", "rebalance_clients.js"), "ws://"+s.ws+"/", "20")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	lines := make(chan []string, 256)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- strings.Fields(sc.Text())
		}
		close(lines)
	}()
	on := map[string]string{} // client -> backend
	moved := map[string]bool{}
	var codes, landed []string
	read := func(until func() bool, what string) {
		t.Helper()
		deadline := time.After(90 * time.Second)
		for !until() {
			select {
			case f, ok := <-lines:
				if !ok {
					t.Fatalf("clients ended waiting for %s", what)
				}
				switch {
				case len(f) == 3 && f[0] == "on":
					if moved[f[1]] {
						landed = append(landed, f[2])
					}
					on[f[1]] = f[2]
				case len(f) == 3 && f[0] == "closed":
					codes = append(codes, f[2])
					moved[f[1]] = true
				}
			case <-deadline:
				t.Fatalf("timed out waiting for %s: %v", what, on)
			}
		}
	}
	count := func(b string) int {
		n := 0
		for _, x := range on {
			if x == b {
				n++
			}
		}
		return n
	}
	read(func() bool { return len(on) == 20 }, "20 clients on b1")
	if count("b1") != 20 {
		t.Fatalf("before the scale-out: %v", on)
	}
	s.write(t, bs, "least_conn", pool, filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem"))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	// Fair share 10 each; the episode ends within 1.05 of it.
	read(func() bool { return count("b1") <= 10 && count("b2") >= 10 }, "both backends within the band")
	for _, c := range codes {
		if c != "1012" {
			t.Fatalf("a moved client got close %s, want 1012: %v", c, codes)
		}
	}
	onNew := 0
	for _, b := range landed {
		if b == "b2" {
			onNew++
		}
	}
	if len(landed) == 0 || onNew*100 < len(landed)*95 {
		t.Fatalf("%d of %d moved clients landed on b2, want at least 95 %%", onNew, len(landed))
	}
	t.Logf("%d clients moved, %d landed on the new backend", len(landed), onNew)
	if st := s.statusDoc(t); !strings.Contains(st, `"rebalance"`) || !strings.Contains(st, `"moved": `+strconv.Itoa(len(codes))) {
		t.Errorf("/status lacks the pool's rebalancing:\n%s", grepLines(st, "moved"))
	}
	if m := s.metricsText(t); !strings.Contains(m, `edge_rebalance_moved_total{pool="app"} `+strconv.Itoa(len(codes))) {
		t.Errorf("metrics:\n%s", grepLines(m, "edge_rebalance"))
	}
}

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"golang.org/x/sys/unix"
)

// BenchmarkHandoff reports the time and CPU per connection of one
// hand-off between two processes, as an upgrade runs it: EDGE_HANDOFF_CONNS
// (default 5000) idle wss connections (TLS 1.3 on edge's record layer, one
// small echo each) move from Server A, in this process, to Server B, in a
// helper process of its own (this test binary re-run as
// TestHandoffAdoptHelper), over a Unix socketpair: A's Handoff against B's
// Adopt. The clients and the backend are the load helper's (TestLoadHelper).
// cpu-µs/conn is A's; B reports its own (adopt-cpu-µs/conn).
//
//	go test -run '^$' -bench Handoff -benchtime 1x ./proxy
//	EDGE_HANDOFF_CONNS=9000 go test -run '^$' -bench Handoff -benchtime 1x ./proxy
//	EDGE_HANDOFF_NICE=19 go test -run '^$' -bench Handoff -benchtime 1x ./proxy   (B at nice 19)
func BenchmarkHandoff(b *testing.B) {
	n := envInt("EDGE_HANDOFF_CONNS", 5000)
	h := startHelper(b, fmt.Sprintf("idle %d 0", n))
	ea := benchEdge(b, spliceReadiness, h)
	fmt.Fprintf(h.in, "edge %s\n", ea.addr)
	h.expect(b, "ready")
	if got := ea.srv.Active(); got != n {
		b.Fatalf("A holds %d connections, want %d", got, n)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "handoff-b")
	ab := startAdoptHelper(b, h.addr, theirs)
	theirs.Close()
	mine := os.NewFile(uintptr(fds[0]), "handoff-a")
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		b.Fatal(err)
	}
	ua := fc.(*net.UnixConn)
	defer ua.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c0, t0 := cpuTime(), time.Now()
	moved, closed, err := ea.srv.Handoff(ctx, ua, time.Second)
	el, cpu := time.Since(t0), cpuTime()-c0
	ua.CloseWrite()
	var k int
	var bcpu time.Duration
	line := ab.expect(b, "adopted ")
	if _, err := fmt.Sscanf(line, "adopted %d %d", &k, &bcpu); err != nil {
		b.Fatalf("adopt helper: %q: %v", line, err)
	}
	if err != nil || moved != n || closed != 0 || k != n {
		b.Fatalf("moved %d closed %d adopted %d (%v), want %d 0 %d", moved, closed, k, err, n, n)
	}
	b.ReportMetric(float64(el.Microseconds())/float64(n), "µs/conn")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/conn")
	b.ReportMetric(float64(bcpu.Microseconds())/float64(n), "adopt-cpu-µs/conn")
	b.ReportMetric(0, "ns/op")
}

// adoptHelperEnv switches the test binary into BenchmarkHandoff's
// receiving process; its value is the backend's address.
const adoptHelperEnv = "EDGE_HANDOFF_HELPER"

// startAdoptHelper starts the receiving process with sock as its
// descriptor 3.
func startAdoptHelper(b *testing.B, backend string, sock *os.File) *loadHelper {
	b.Helper()
	args := []string{os.Args[0], "-test.run=^TestHandoffAdoptHelper$", "-test.count=1"}
	if n := os.Getenv("EDGE_HANDOFF_NICE"); n != "" {
		// The receiver behind the host's other work, as on a busy box.
		args = append([]string{"nice", "-n", n}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), adoptHelperEnv+"="+backend)
	cmd.ExtraFiles = []*os.File{sock}
	return runHelper(b, cmd, "adopt helper")
}

// TestHandoffAdoptHelper is BenchmarkHandoff's receiving process: a
// Server over the same backend (pool "bench", member "b1") adopting from
// descriptor 3 until end of file, then printing the count and its CPU
// time; it holds the connections until its standard input closes.
func TestHandoffAdoptHelper(t *testing.T) {
	addr := os.Getenv(adoptHelperEnv)
	if addr == "" {
		t.Skip("run by BenchmarkHandoff")
	}
	pool := newPool(t, "bench", balance.LeastConn, map[string]string{"b1": addr})
	pool.IdleTimeout, pool.WriteTimeout = time.Hour, 30*time.Second
	e := startEdge(t, edgeConfig{tls: true, opts: Options{Routes: []Route{{Default: true, Pool: pool}}}})
	f := os.NewFile(3, "handoff")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	uc := fc.(*net.UnixConn)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	n, err := e.srv.Adopt(context.Background(), uc)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if err != nil {
		t.Errorf("Adopt: %v", err)
	}
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	fmt.Printf("adopted %d %d\n", n, cpu)
	uc.Close()
	bufio.NewReader(os.Stdin).ReadString('\n')
}

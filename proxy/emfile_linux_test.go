package proxy

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// TestEMFILEOnDialEjectsNothing: when edge itself is out of descriptors,
// the dial fails with EMFILE; that is edge's trouble, not the backend's,
// and ejects nothing. The test lowers RLIMIT_NOFILE, which is process-wide,
// so it runs itself again in a child process.
func TestEMFILEOnDialEjectsNothing(t *testing.T) {
	if os.Getenv("EDGE_TEST_EMFILE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEMFILEOnDialEjectsNothing$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "EDGE_TEST_EMFILE_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	// Two backends: a failure counted against one of them would eject it
	// (the other stays available).
	p := ejectingPool(t, map[string]string{"b1": startBackend(t, "b1").Addr(), "b2": startBackend(t, "b2").Addr()})
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	// One keep-alive connection, answered by the backend (a 403 relayed as
	// an ordinary response), so the second request needs no new descriptor
	// on edge's side but the backend socket.
	c := e.rawConn(t)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	ask := func() int {
		io.WriteString(c, testkit.RawUpgrade("/reject", "x"))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read answer: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := ask(); got != http.StatusForbidden {
		t.Fatalf("first answer: got %d, want the backend's 403", got)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// No new descriptor at all: every socket(2) fails with EMFILE.
	lim := old
	lim.Cur = 0
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	got := ask()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatalf("restore rlimit: %v", err)
	}
	if got != http.StatusServiceUnavailable {
		t.Errorf("answer at EMFILE: got %d, want 503", got)
	}
	if ids := ejectedIDs(p); len(ids) != 0 {
		t.Fatalf("EMFILE on dial ejected %v", ids)
	}
	if f := e.obs.dialFailures(); len(f) != 0 {
		t.Fatalf("EMFILE counted as a backend failure: %v", f)
	}
}

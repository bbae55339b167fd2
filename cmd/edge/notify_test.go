package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sdSocket is the service manager's end of the sd_notify protocol: a
// datagram socket whose messages the test reads in order.
type sdSocket struct {
	c    *net.UnixConn
	path string
}

func newSDSocket(t *testing.T) *sdSocket {
	t.Helper()
	// A short directory: a Unix socket path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &sdSocket{c: c, path: path}
}

// next returns the next message, failing the test if none comes.
func (s *sdSocket) next(t *testing.T) string {
	t.Helper()
	_ = s.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	n, err := s.c.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message: %v", err)
	}
	return string(buf[:n])
}

func hasLine(msg, line string) bool {
	for _, l := range strings.Split(msg, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// TestSystemdNotify drives the protocol a Type=notify unit relies on:
// READY=1 when serving, RELOADING=1 with MONOTONIC_USEC then READY=1 around
// a reload (also a refused one, whose status says so), STOPPING=1 on drain.
func TestSystemdNotify(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	sd := newSDSocket(t)
	p := startEdgeEnv(t, s.cfg, "NOTIFY_SOCKET="+sd.path)

	if msg := sd.next(t); !hasLine(msg, "READY=1") {
		t.Fatalf("first message %q, want READY=1", msg)
	}

	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	msg := sd.next(t)
	if !hasLine(msg, "RELOADING=1") || !strings.Contains(msg, "MONOTONIC_USEC=") {
		t.Fatalf("on SIGHUP got %q, want RELOADING=1 and MONOTONIC_USEC", msg)
	}
	if msg := sd.next(t); !hasLine(msg, "READY=1") || !strings.Contains(msg, "last reload ok") {
		t.Fatalf("after reload got %q, want READY=1 and a status saying ok", msg)
	}

	if err := os.WriteFile(s.cfg, []byte("listeners: [{bogus: 1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if msg := sd.next(t); !hasLine(msg, "RELOADING=1") {
		t.Fatalf("on second SIGHUP got %q, want RELOADING=1", msg)
	}
	if msg := sd.next(t); !hasLine(msg, "READY=1") || !strings.Contains(msg, "refused") || strings.Count(msg, "\n") != 1 {
		t.Fatalf("after a refused reload got %q, want READY=1 and a one-line status saying refused", msg)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := sd.next(t); !hasLine(msg, "STOPPING=1") {
		t.Fatalf("on SIGTERM got %q, want STOPPING=1", msg)
	}
}

// TestProbe is the container health check: `edge -probe URL` exits 0 while
// the admin listener answers /healthz, and 1 once nothing listens there.
func TestProbe(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	p := startEdge(t, s.cfg)
	url := "http://" + s.admin + "/healthz"
	if out, err := exec.Command(edgeBin, "-probe", url).CombinedOutput(); err != nil {
		t.Fatalf("edge -probe %s on a running edge: %v\n%s", url, err, out)
	}
	if out, err := exec.Command(edgeBin, "-probe", "http://"+s.admin+"/nothing-here").CombinedOutput(); err == nil {
		t.Fatalf("edge -probe of a 404 exited 0:\n%s", out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.done <- nil // for the cleanup's wait
	if out, err := exec.Command(edgeBin, "-probe", url).CombinedOutput(); err == nil {
		t.Fatalf("edge -probe exited 0 with edge stopped:\n%s", out)
	}
}

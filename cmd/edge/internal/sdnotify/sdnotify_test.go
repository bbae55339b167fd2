package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen is the manager's end: a datagram socket at a short path.
func listen(t *testing.T) (*net.UnixConn, string) {
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
	return c, path
}

// next reads one datagram; the sender has already written it, so the
// deadline only bounds a broken test.
func next(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// TestMessages: each state is one datagram of the lines sd_notify(3)
// defines, and the environment no longer names the socket.
func TestMessages(t *testing.T) {
	c, path := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	n := FromEnv()
	if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
		t.Fatalf("NOTIFY_SOCKET still set to %q", v)
	}
	if n.Socket() != path {
		t.Fatalf("Socket() = %q, want %q", n.Socket(), path)
	}
	if err := n.Ready("serving\nwith two lines"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, c); got != "READY=1\nSTATUS=serving; with two lines" {
		t.Errorf("ready: %q", got)
	}
	if err := n.ReadyAsMain(42, "upgraded"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, c); got != "MAINPID=42\nREADY=1\nSTATUS=upgraded" {
		t.Errorf("ready as main: %q", got)
	}
	if err := n.Reloading(); err != nil {
		t.Fatal(err)
	}
	got := next(t, c)
	if !strings.HasPrefix(got, "RELOADING=1") {
		t.Errorf("reloading: %q", got)
	}
	if _, err := monotonicMicros(); err == nil && !strings.Contains(got, "\nMONOTONIC_USEC=") {
		t.Errorf("reloading without the clock where there is one: %q", got)
	}
	if err := n.Stopping(); err != nil {
		t.Fatal(err)
	}
	if got := next(t, c); got != "STOPPING=1\nSTATUS=draining" {
		t.Errorf("stopping: %q", got)
	}
}

// TestNoManager: without NOTIFY_SOCKET, or with a value that is no socket
// name, nothing is sent and nothing fails; a manager that went away is an
// error to log.
func TestNoManager(t *testing.T) {
	for _, v := range []string{"", "relative/path"} {
		t.Setenv("NOTIFY_SOCKET", v)
		n := FromEnv()
		if err := n.Ready("x"); err != nil || n.Socket() != "" {
			t.Errorf("NOTIFY_SOCKET=%q: Ready %v, Socket %q", v, err, n.Socket())
		}
		if err := n.Reloading(); err != nil {
			t.Errorf("NOTIFY_SOCKET=%q: Reloading %v", v, err)
		}
	}
	var nilN *Notifier
	if err := nilN.Stopping(); err != nil || nilN.Socket() != "" {
		t.Errorf("nil Notifier: %v, %q", err, nilN.Socket())
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
	if err := FromEnv().Ready("x"); err == nil {
		t.Error("a manager socket that does not exist: no error")
	}
}

// TestAbstractSocket: "@name" is the abstract socket whose name starts
// with a NUL byte.
func TestAbstractSocket(t *testing.T) {
	name := "edge-sdnotify-test-" + filepath.Base(t.TempDir())
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "\x00" + name, Net: "unixgram"})
	if err != nil {
		t.Skipf("no abstract sockets here: %v", err)
	}
	defer c.Close()
	t.Setenv("NOTIFY_SOCKET", "@"+name)
	n := FromEnv()
	if n.Socket() != "@"+name {
		t.Fatalf("Socket() = %q, want the name as given", n.Socket())
	}
	if err := n.Stopping(); err != nil {
		t.Fatal(err)
	}
	if got := next(t, c); got != "STOPPING=1\nSTATUS=draining" {
		t.Errorf("stopping: %q", got)
	}
}

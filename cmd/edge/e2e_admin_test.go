package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// TestPprofOffUnlessEnabled: /debug/pprof/ is 404 on the admin listener
// by default and served with admin.pprof: true.
func TestPprofOffUnlessEnabled(t *testing.T) {
	bs := backends(t, "b1")
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint("pprof=", on), func(t *testing.T) {
			s := newSetup(t, bs, "least_conn", "")
			if on {
				body := strings.Replace(readFile(t, s.cfg), fmt.Sprintf("admin: {address: %q}", s.admin), fmt.Sprintf("admin: {address: %q, pprof: true}", s.admin), 1)
				writeFile(t, s.cfg, body)
			}
			startEdge(t, s.cfg)
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol"} {
				resp, err := http.Get("http://" + s.admin + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("%s: status %d, want %d", path, resp.StatusCode, want)
				}
			}
		})
	}
}

// TestCheckRefusesPublicAdmin: edge -check refuses a non-loopback admin
// address without admin.allow_public, at its line; with it, the file is
// accepted with a warning, and the running edge logs one at warn.
func TestCheckRefusesPublicAdmin(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	port := strings.TrimPrefix(testkit.ClosedPort(t), "127.0.0.1:")
	body := "admin:\n  address: \"0.0.0.0:" + port + "\"\nlisteners: [{address: " + testkit.ClosedPort(t) + "}]\npools: [{name: app, backends: [{address: 127.0.0.1:9}]}]\nroutes: [{default: true, pool: app}]\n"
	writeFile(t, cfg, body)
	var out bytes.Buffer
	cmd := exec.Command(edgeBin, "-check", "-config", cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("-check: %v, want exit 1; output:\n%s", err, out.String())
	}
	if want := cfg + ":2: admin.address:"; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "allow_public") {
		t.Fatalf("-check output lacks %q naming allow_public:\n%s", want, out.String())
	}

	writeFile(t, cfg, strings.Replace(body, "admin:\n", "admin:\n  allow_public: true\n", 1))
	out.Reset()
	cmd = exec.Command(edgeBin, "-check", "-config", cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("-check with allow_public: %v\n%s", err, out.String())
	}
	if want := "warning: " + cfg + ":3: admin.address:"; !strings.Contains(out.String(), want) {
		t.Fatalf("-check output lacks %q:\n%s", want, out.String())
	}
	p := startEdge(t, cfg)
	p.waitLog(t, `"level":"WARN","msg":"admin listener is not on loopback`)
}

// TestDescriptorLimitRefusesCleanly runs edge with RLIMIT_NOFILE 200 and
// opens more client sockets than that: edge closes the excess itself
// (instead of leaving them in the kernel's backlog), warns, and its admin
// listener keeps answering.
func TestDescriptorLimitRefusesCleanly(t *testing.T) {
	const nofile, clients = 200, 260
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	writeFile(t, s.cfg, strings.Replace(readFile(t, s.cfg), "  - name: ws\n", "  - name: ws\n    read_header_timeout: 5m\n", 1))

	p := startEdgeCmd(t, exec.Command("/bin/sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), edgeBin, "-config", s.cfg))
	// (200 - 128) / 2 sockets with a backend, as many again without.
	p.waitLog(t, `"rlimit_nofile":200,"max_connections":36,"max_client_sockets":36`)

	closed := make(chan struct{}, clients)
	conns := make([]net.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients {
		c, err := net.Dial("tcp", s.ws)
		if err != nil {
			t.Fatalf("dial: %v (the kernel refused; edge should have)", err)
		}
		conns = append(conns, c)
		go func() {
			// An idle client: nothing comes back until edge closes it.
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			if _, err := c.Read(make([]byte, 1)); !isDeadline(err) {
				closed <- struct{}{}
			}
		}()
	}
	deadline := time.After(30 * time.Second)
	for n := 0; n < clients-36; n++ {
		select {
		case <-closed:
		case <-deadline:
			t.Fatalf("%d of the %d sockets over the cap closed by edge; the rest wait in the backlog", n, clients-36)
		}
	}
	p.waitLog(t, `"level":"WARN","msg":"client sockets at the cap`)

	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + s.admin + "/healthz")
	if err != nil {
		t.Fatalf("admin /healthz with every client socket taken: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /healthz: status %d", resp.StatusCode)
	}

	// Once the held sockets go, clients are served again.
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testkit.Await(t, 20*time.Second, "clients served once the held sockets closed", func() (bool, string) {
		resp, err := hc.Get("http://" + s.ws + "/whoami")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("status %d", resp.StatusCode)
	})
}

func isDeadline(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

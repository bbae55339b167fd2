package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// TestAcceptLimitClosesOverCap: at the cap a new client socket is closed
// at once, a warning is logged once however many are refused, and a socket
// counts until its descriptor is closed, including after the splice took
// it over.
func TestAcceptLimitClosesOverCap(t *testing.T) {
	var logBuf testkit.Buffer
	lim := NewAcceptLimit(2, slog.New(slog.NewTextHandler(&logBuf, nil)))
	e, _ := oneBackendEdge(t, spliceReadiness, false, func(_ *Pool, cfg *edgeConfig) { cfg.accept = lim })

	ws, _ := e.dialWS(t, "/", nil)
	testkit.Ask(t, ws, "x")
	idle := e.rawConn(t)
	testkit.WaitFor(t, "two sockets open", func() bool { return lim.Open() == 2 })

	for i := 0; i < 3; i++ {
		c := e.rawConn(t)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
			t.Fatalf("socket over the cap: read %v, want it closed", err)
		}
	}
	if got := lim.Refused(); got != 3 {
		t.Errorf("refused %d, want 3", got)
	}
	if n := strings.Count(logBuf.String(), "client sockets at the cap"); n < 1 || n > 3 {
		t.Errorf("%d warnings for 3 refusals:\n%s", n, logBuf.String())
	}

	ws.Close() // a taken-over socket gives its place back when its descriptor closes
	idle.Close()
	testkit.WaitFor(t, "no socket open", func() bool { return lim.Open() == 0 })
	resp, err := e.httpClient().Get(e.httpURL("/whoami"))
	if err != nil {
		t.Fatalf("after the sockets closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the sockets closed: status %d", resp.StatusCode)
	}
}

func isTimeoutErr(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, io.EOF)
}

// TestEverySecond: one warning per second at most, the next one counting
// what was suppressed.
func TestEverySecond(t *testing.T) {
	var buf testkit.Buffer
	now := time.Unix(1000, 0)
	e := everySecond{log: slog.New(slog.NewTextHandler(&buf, nil)), now: func() time.Time { return now }}
	for i := 0; i < 5; i++ {
		e.warn("accept failed")
		now = now.Add(100 * time.Millisecond)
	}
	now = now.Add(time.Second)
	e.warn("accept failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "suppressed=0") || !strings.Contains(lines[1], "suppressed=4") || !strings.Contains(lines[1], "level=WARN") {
		t.Fatalf("got\n%s", buf.String())
	}
}

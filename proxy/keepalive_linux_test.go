package proxy

import (
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
)

// TestKeepAliveFollowsPings: ss, reading the kernel's timers, sees edge's
// client socket of a pool that pings its clients hourly and ends the
// silent ones first probed after minutes (a ping interval and a ping
// timeout, four hours), and its backend socket after minutes (the ping
// interval, at most two), instead of 15 s; a pool without pings keeps both
// probing at 15 s.
func TestKeepAliveFollowsPings(t *testing.T) {
	if _, err := exec.LookPath("ss"); err != nil {
		t.Fatal("ss (iproute2) is needed: scripts/test.sh installs it")
	}
	forEachPath(t, func(t *testing.T, sp splicePath) {
		for i, pings := range []bool{true, false, true} {
			// The last round over TLS: the client conn is a tls.Conn.
			tlsOn := i == 2
			addr := sinkBackend(t)
			p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
			if pings {
				p.PingInterval, p.PingTimeout = time.Hour, 3*time.Hour
			}
			e := startEdge(t, edgeConfig{splice: sp, tls: tlsOn, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
			c, _ := rawUpgraded(t, e)
			defer c.Close()
			client := keepAliveTimer(t, "sport = :"+port(t, e.addr))
			backend := keepAliveTimer(t, "dport = :"+port(t, addr))
			for side, due := range map[string]string{"client": client, "backend": backend} {
				switch minutes := strings.Contains(due, "min"); {
				case due == "":
					t.Errorf("%s socket (pings %v): no keep-alive timer", side, pings)
				case pings && !minutes:
					t.Errorf("%s socket of a pool pinging hourly: keep-alive due in %q, want minutes", side, due)
				case !pings && minutes:
					t.Errorf("%s socket without pings: keep-alive due in %q, want seconds (15 s)", side, due)
				}
			}
		}
	})
}

// keepAliveDue matches the keep-alive timer ss -o prints, with the time
// until it fires ("239min59sec", "14sec", "9.876ms").
var keepAliveDue = regexp.MustCompile(`timer:\(keepalive,([^,)]+),`)

// keepAliveTimer returns when the keep-alive timer of the one established
// socket ss selects by filter fires ("59min", "14sec"), "" when it has
// none. While bytes are unacknowledged (TLS's session tickets just sent)
// ss shows the retransmission timer instead: it waits for that to end.
func keepAliveTimer(t *testing.T, filter string) string {
	t.Helper()
	var line string
	testkit.WaitFor(t, "no bytes in flight on "+filter, func() bool {
		out, err := exec.Command("ss", "-tnoH", "state", "established", "( "+filter+" )").Output()
		if err != nil {
			t.Fatalf("ss %s: %v", filter, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || lines[0] == "" {
			t.Fatalf("ss %s: want one socket, got %q", filter, out)
		}
		line = lines[0]
		return !strings.Contains(line, "timer:(on,")
	})
	if m := keepAliveDue.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// port is the port of a host:port address.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

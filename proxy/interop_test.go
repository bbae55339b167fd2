package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testkit"
)

// clientResult is the JSON line the scripts under testdata print.
type clientResult struct {
	Code     int    `json:"code"`
	Reason   string `json:"reason"`
	Sent     int64  `json:"sent"`
	Error    string `json:"error"`
	WasClean bool   `json:"wasClean"`
}

// runClient runs cmd and decodes the JSON line it prints.
func runClient(t *testing.T, cmd *exec.Cmd) clientResult {
	t.Helper()
	var r clientResult
	runJSON(t, cmd, &r)
	return r
}

// runJSON runs cmd, a client we did not write, and decodes the JSON line
// it prints into v.
func runJSON(t *testing.T, cmd *exec.Cmd, v any) {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("%s: %v\n%s\n%s", strings.Join(cmd.Args, " "), err, out, msg)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("%s printed %q: %v", cmd.Args[1], out, err)
	}
}

// startClient runs cmd in the background, for a test that acts on the
// connection while the client sends; its result (or what went wrong, in
// Error) arrives on the channel once the client exits.
func startClient(cmd *exec.Cmd) <-chan clientResult {
	res := make(chan clientResult, 1)
	go func() {
		var r clientResult
		out, err := cmd.Output()
		if err == nil {
			err = json.Unmarshal(out, &r)
		}
		if err != nil {
			r.Error = err.Error() + ": " + string(out)
		}
		res <- r
	}()
	return res
}

// countingBackend is a raw WebSocket backend that answers the upgrade and
// counts the bytes it receives after it until the proxy closes it.
func countingBackend(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, resp := testkit.ReadUpgrade(t, br)
		io.WriteString(c, resp)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 64<<10)
		for {
			k, err := br.Read(buf)
			n.Add(int64(k))
			if err != nil {
				return
			}
		}
	})
	return addr, &n
}

// limitedEdge is an edge over one counting backend whose pool refuses
// frames over maxFrame and messages over maxMsg.
func limitedEdge(t *testing.T, sp splicePath, maxFrame, maxMsg int64) (*edge, *atomic.Int64) {
	t.Helper()
	addr, n := countingBackend(t)
	p := newPool(t, "limited", balance.LeastConn, map[string]string{"b": addr})
	p.MaxFrameBytes = maxFrame
	p.MaxMessageBytes = maxMsg
	e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	return e, n
}

func interopCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestNodeWSFrameTooBigSees1009: Node ws sends one 8 MiB frame through a
// 4 MiB frame limit and must read the close 1009 edge sends. Closing while
// the frame still arrives makes the kernel answer the unread input with a
// reset, and ws then reports 1006 (RFC 6455 §7.1.1 asks for a lingering
// close instead).
func TestNodeWSFrameTooBigSees1009(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, got := limitedEdge(t, sp, 4<<20, 0)
		r := runClient(t, interop.Node(t, interopCtx(t), "testdata/wsclient.js", e.url("/"), "frame", strconv.Itoa(8<<20)))
		if r.Code != CloseMessageTooBig {
			t.Fatalf("Node ws saw close %d (%q, error %q), want %d", r.Code, r.Reason, r.Error, CloseMessageTooBig)
		}
		if got, want := e.obs.waitClosed(t), "frame_too_big"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
		if n := got.Load(); n >= 4<<20 {
			t.Fatalf("backend received %d bytes of an 8 MiB frame over a 4 MiB limit", n)
		}
	})
}

// TestChromiumTooBigSees1009: the same with headless Chromium: a page
// sends one 8 MiB message and its close event must carry 1009. Chromium
// sends a large message as several frames, so the message limit is what
// trips.
func TestChromiumTooBigSees1009(t *testing.T) {
	exe := interop.Chromium(t)
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := limitedEdge(t, sp, 4<<20, 4<<20)
		r := runClient(t, interop.Node(t, interopCtx(t), "testdata/chromium.js", exe, e.url("/"), strconv.Itoa(8<<20)))
		if r.Code != CloseMessageTooBig {
			t.Fatalf("Chromium saw close %d (%q, clean %v), want %d", r.Code, r.Reason, r.WasClean, CloseMessageTooBig)
		}
	})
}

// TestNodeWSMessageTooBigSees1009: Node ws sends an 8 MiB message in eight
// 1 MiB fragments (fin:false) through a 4 MiB message limit: 1009, and the
// backend never gets the whole message.
func TestNodeWSMessageTooBigSees1009(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, got := limitedEdge(t, sp, 4<<20, 4<<20)
		r := runClient(t, interop.Node(t, interopCtx(t), "testdata/wsclient.js", e.url("/"), "fragments", strconv.Itoa(8<<20), strconv.Itoa(1<<20)))
		if r.Code != CloseMessageTooBig {
			t.Fatalf("Node ws saw close %d (%q, error %q), want %d", r.Code, r.Reason, r.Error, CloseMessageTooBig)
		}
		if got, want := e.obs.waitClosed(t), "message_too_big"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
		if n := got.Load(); n > 4<<20+64 {
			t.Fatalf("backend received %d bytes of a message over the 4 MiB limit", n)
		}
	})
}

// TestPythonFragmentedMessageSees1009: python websockets sends a 600 KB
// message in 1000-byte fragments through a 64 KiB message limit.
func TestPythonFragmentedMessageSees1009(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, got := limitedEdge(t, sp, 0, 64<<10)
		r := runClient(t, interop.Python(t, interopCtx(t), "testdata/fragments.py", e.url("/"), "600000", "1000"))
		if r.Code != CloseMessageTooBig {
			t.Fatalf("python websockets saw close %d (%q), want %d", r.Code, r.Reason, CloseMessageTooBig)
		}
		if got, want := e.obs.waitClosed(t), "message_too_big"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
		if n := got.Load(); n > 64<<10+2000 {
			t.Fatalf("backend received %d bytes of a message over the 64 KiB limit", n)
		}
	})
}

// TestNodeWSDrainWhileSending: a drain reaches a Node ws client that is
// sending 1 MiB messages as fast as it can as a close 1001.
func TestNodeWSDrainWhileSending(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, got := limitedEdge(t, sp, 0, 0)
		cmd := interop.Node(t, interopCtx(t), "testdata/wsclient.js", e.url("/"), "stream", strconv.Itoa(1<<30))
		res := startClient(cmd)
		testkit.WaitFor(t, "the client to be sending", func() bool { return got.Load() > 8<<20 })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		e.srv.Drain(ctx, 0)
		r := <-res
		if r.Code != CloseGoingAway {
			t.Fatalf("Node ws saw close %d (%q, error %q, sent %d), want %d", r.Code, r.Reason, r.Error, r.Sent, CloseGoingAway)
		}
	})
}

// TestNodeWSBackendLeavingWhileSending: a backend that leaves gets its
// clients a close 1012 and then goes away itself while a Node ws client is
// still sending; the client must still read the 1012, not a reset.
func TestNodeWSBackendLeavingWhileSending(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		var got atomic.Int64
		gone := make(chan struct{})
		addr := testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			_, resp := testkit.ReadUpgrade(t, br)
			io.WriteString(c, resp)
			go func() { <-gone; c.Close() }()
			buf := make([]byte, 64<<10)
			for {
				k, err := br.Read(buf)
				got.Add(int64(k))
				if err != nil {
					return
				}
			}
		})
		p := newPool(t, "leaving", balance.LeastConn, map[string]string{"b": addr})
		// Everything the client sent before it read the 1012 is discarded
		// once the backend is gone. On a loaded machine that is more than
		// the default 16 MiB: the client's own 4 MiB queue, its send
		// buffer and the edge's receive buffer, which on loopback grows
		// to tcp_rmem's maximum (32 MiB here). Past LingerBytes edge
		// closes at once, and the reset loses the close frame the client
		// had not read yet; that cap is TestLingerBytesCap's subject, not
		// this test's.
		p.LingerBytes = 1 << 30
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		cmd := interop.Node(t, interopCtx(t), "testdata/wsclient.js", e.url("/"), "stream", strconv.Itoa(1<<30))
		res := startClient(cmd)
		testkit.WaitFor(t, "the client to be sending", func() bool { return got.Load() > 8<<20 })
		if n := e.srv.CloseBackend(p.Balancer.Snapshot().Backends[0], 0); n != 1 {
			t.Fatalf("CloseBackend: %d connections, want 1", n)
		}
		// The backend goes away once its client was told.
		testkit.WaitFor(t, "the close to be sent", func() bool { return e.srv.closesSent() > 0 || e.obs.closedCount() > 0 })
		close(gone)
		r := <-res
		if r.Code != CloseServiceRestart {
			e.obs.mu.Lock()
			defer e.obs.mu.Unlock()
			t.Fatalf("Node ws saw close %d (%q, error %q, sent %d), want %d; edge closed for %v, close codes %v", r.Code, r.Reason, r.Error, r.Sent, CloseServiceRestart, e.obs.closed, e.obs.closes)
		}
	})
}

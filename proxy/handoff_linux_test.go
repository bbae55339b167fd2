package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/proxy/internal/handoff"
	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"
)

// The hand-off tests run two Servers, A (the old process) and B (the new
// one), in this one test process, connected by a Unix socketpair: the
// descriptors really go through SCM_RIGHTS, and A closes its own copies,
// exactly as between two processes. (The end-to-end test through real
// edge processes lives with cmd/edge.)

// accessLines returns the JSON access lines written to log so far.
func accessLines(t *testing.T, log *testkit.Buffer) []map[string]any {
	var out []map[string]any
	for _, ln := range bytes.Split(bytes.TrimSpace(log.Bytes()), []byte("\n")) {
		if len(ln) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(ln, &m); err != nil {
			t.Fatalf("access line %q: %v", ln, err)
		}
		out = append(out, m)
	}
	return out
}

// pair is A and B over the same backend, each with its own pool "chat"
// (member "b1"), as two processes with the same configuration have.
type pair struct {
	a, b         *edge
	poolA, poolB *Pool
	logB         *testkit.Buffer
	ua, ub       *net.UnixConn
}

func startPair(t *testing.T, backendAddr string, tune func(p *Pool), cfgA edgeConfig) *pair {
	t.Helper()
	pr := &pair{logB: &testkit.Buffer{}}
	pr.poolA = newPool(t, "chat", balance.LeastConn, map[string]string{"b1": backendAddr})
	pr.poolB = newPool(t, "chat", balance.LeastConn, map[string]string{"b1": backendAddr})
	if tune != nil {
		tune(pr.poolA)
		tune(pr.poolB)
	}
	cfgA.opts.Routes = []Route{{Default: true, Pool: pr.poolA}}
	pr.a = startEdge(t, cfgA)
	pr.b = startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: pr.poolB}},
		AccessLog: slog.New(slog.NewJSONHandler(pr.logB, nil))}})
	pr.ua, pr.ub = testkit.UnixPair(t)
	return pr
}

// handoff runs A.Handoff against B.Adopt and returns their results.
func (pr *pair) handoff(t *testing.T, window time.Duration) (moved, closed, adopted int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := pr.b.srv.Adopt(ctx, pr.ub)
		done <- res{n, err}
	}()
	moved, closed, err := pr.a.srv.Handoff(ctx, pr.ua, window)
	if err != nil {
		t.Fatalf("Handoff: %v", err)
	}
	pr.ua.CloseWrite() // Adopt returns at EOF
	r := <-done
	if r.err != nil {
		t.Fatalf("Adopt: %v", r.err)
	}
	return moved, closed, r.n
}

// echoer is one client echoing numbered messages.
type echoer struct {
	c          *websocket.Conn
	mu         sync.Mutex
	n          int   // messages answered
	in, out    int64 // frame bytes sent and received
	err        error
	stop, done chan struct{}
}

func (e *echoer) count() int { e.mu.Lock(); defer e.mu.Unlock(); return e.n }

func (e *echoer) run(id int) {
	defer close(e.done)
	for seq := 0; ; seq++ {
		select {
		case <-e.stop:
			return
		default:
		}
		msg := fmt.Sprintf("c%d-%d", id, seq)
		e.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if err := e.c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			e.mu.Lock()
			e.err = err
			e.mu.Unlock()
			return
		}
		_, got, err := e.c.ReadMessage()
		if err == nil && string(got) != msg {
			err = fmt.Errorf("got %q, want %q (out of order or lost)", got, msg)
		}
		e.mu.Lock()
		if err != nil {
			e.err = err
		} else {
			e.n++
			e.in += int64(6 + len(msg))
			e.out += int64(2 + len(msg))
		}
		e.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// TestHandoffKeepsEchoing: 200 plain WebSockets, each echoing numbered
// messages without pause, move from A to B mid-traffic: every message is
// answered, in order, none is closed; A then holds none and B all, B's
// pool counts them on the backend, and closing them gives 200 access
// lines in B's log with the original start (A's clock runs an hour
// behind, so a start B made up would show a short duration) and the byte
// counts of the whole connection.
func TestHandoffKeepsEchoing(t *testing.T) {
	handoffKeepsEchoing(t, 200, false)
}

// TestHandoffTLS13KeepsEchoing: the same with TLS 1.3 WebSockets on
// edge's record layer: their keys, sequence numbers and any record
// already half read move with them, and B protects their records from
// where A stopped (a wrong sequence number or key would fail the next
// record's tag at the client).
func TestHandoffTLS13KeepsEchoing(t *testing.T) {
	pr := handoffKeepsEchoing(t, 100, true)
	if owned, _ := pr.a.srv.RecordLayerTakeovers(); owned != 100 {
		t.Errorf("A took over the records of %d connections, want 100", owned)
	}
}

func handoffKeepsEchoing(t *testing.T, n int, tlsOn bool) *pair {
	be := startBackend(t, "b1")
	// The clients' X-Request-Id names their access lines: trusted from loopback.
	pr := startPair(t, be.Addr(), nil, edgeConfig{tls: tlsOn, lo: ListenerOptions{TrustedProxies: mustPrefixes("127.0.0.0/8")},
		opts: Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }}})
	cs := make([]*echoer, n)
	for i := range cs {
		h := http.Header{"X-Request-Id": {fmt.Sprintf("c%d", i)}}
		c, _ := pr.a.dialWS(t, "/", h)
		cs[i] = &echoer{c: c, stop: make(chan struct{}), done: make(chan struct{})}
		go cs[i].run(i)
	}
	testkit.WaitFor(t, "every client echoing through A", func() bool {
		for _, e := range cs {
			if e.count() < 3 {
				return false
			}
		}
		return true
	})
	// Every connection is busy most of the time, and on a loaded machine
	// (the race detector, other tests) a run can outlast the production
	// bound on retries many times over: the test asks that each one
	// moves once it is quiet, within the hand-off's 20 s context.
	pr.a.srv.testHandoff = &handoffHooks{sender: handoff.Options{RetryFor: 15 * time.Second}}
	moved, closed, adopted := pr.handoff(t, time.Second)
	if moved != n || closed != 0 || adopted != n {
		t.Fatalf("moved %d closed %d adopted %d, want %d 0 %d", moved, closed, adopted, n, n)
	}
	after := make([]int, n)
	for i, e := range cs {
		after[i] = e.count()
	}
	testkit.WaitFor(t, "every client echoing through B", func() bool {
		for i, e := range cs {
			if e.count() < after[i]+3 {
				return false
			}
		}
		return true
	})
	if got := pr.a.srv.Active(); got != 0 {
		t.Errorf("A holds %d connections, want 0", got)
	}
	if got := epollWatched(t, pr.a.srv); got != 0 {
		t.Errorf("A's epoll sets still watch %d sockets B holds", got)
	}
	if got := pr.b.srv.Active(); got != n {
		t.Errorf("B holds %d connections, want %d", got, n)
	}
	if got := pr.b.srv.recordConns(); tlsOn && got != n {
		t.Errorf("B protects the records of %d connections, want %d", got, n)
	}
	if got := pr.poolA.Balancer.Snapshot().ByID("b1").Active(); got != 0 {
		t.Errorf("A's backend count %d, want 0", got)
	}
	if got := pr.poolB.Balancer.Snapshot().ByID("b1").Active(); got != int64(n) {
		t.Errorf("B's backend count %d, want %d", got, n)
	}
	if got := pr.b.srv.poolCounter("chat").Load(); got != int64(n) {
		t.Errorf("B's pool admission count %d, want %d", got, n)
	}
	for i, e := range cs {
		close(e.stop)
		<-e.done
		if e.err != nil {
			t.Fatalf("client %d: %v", i, e.err)
		}
		e.c.Close()
	}
	// A connection leaves the registry before it writes its access line,
	// so wait for the lines themselves.
	testkit.WaitFor(t, "every connection's access line in B", func() bool {
		return pr.b.srv.Active() == 0 && len(accessLines(t, pr.logB)) >= n
	})
	lines := accessLines(t, pr.logB)
	if len(lines) != n {
		t.Fatalf("B wrote %d access lines, want %d", len(lines), n)
	}
	for _, l := range lines {
		var i int
		fmt.Sscanf(l["request_id"].(string), "c%d", &i)
		e := cs[i]
		if d := l["dur_s"].(float64); d < 3600 {
			t.Errorf("%v: dur_s %.3f: the start was not A's", l["request_id"], d)
		}
		if in := int64(l["bytes_in"].(float64)); in < e.in {
			t.Errorf("%v: bytes_in %d, the client sent %d", l["request_id"], in, e.in)
		}
		if out := int64(l["bytes_out"].(float64)); out < e.out {
			t.Errorf("%v: bytes_out %d, the client got %d", l["request_id"], out, e.out)
		}
		if l["route"] != "chat" || l["backend"] != "b1" || l["method"] != "GET" || l["kind"] != "ws" {
			t.Errorf("access line fields: %v", l)
		}
	}
	pr.a.obs.mu.Lock()
	defer pr.a.obs.mu.Unlock()
	for _, r := range pr.a.obs.closed {
		if r != string(ReasonMoved) {
			t.Errorf("A observed a close %q, want only %q", r, ReasonMoved)
		}
	}
	return pr
}

// epollWatched counts the sockets s's pollers watch, from
// /proc/self/fdinfo of their epoll descriptors (each also watches its
// eventfd, not counted). A socket handed over stays watched unless it was
// taken out: its file lives on in the other process.
func epollWatched(t *testing.T, s *Server) int {
	n, err := s.rt.Watched()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestHandoffNoDescriptorLeak: a round of hand-off (connections opened
// through A, moved, closed in B) leaves as many descriptors open as
// before it, once both Servers' pollers exist.
func TestHandoffNoDescriptorLeak(t *testing.T) {
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{})
	warm := func(e *edge) {
		c, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c, "warm")
		c.Close()
	}
	warm(pr.a)
	warm(pr.b)
	testkit.WaitFor(t, "warm-up ended", func() bool { return pr.a.srv.Active() == 0 && pr.b.srv.Active() == 0 && be.Conns() == 0 })
	base := openFDs(t)
	var cs []*websocket.Conn
	for range 20 {
		c, _ := pr.a.dialWS(t, "/", nil)
		testkit.Ask(t, c, "before")
		cs = append(cs, c)
	}
	if moved, _, _ := pr.handoff(t, time.Second); moved != 20 {
		t.Fatalf("moved %d, want 20", moved)
	}
	for _, c := range cs {
		testkit.Ask(t, c, "after")
		c.Close()
	}
	testkit.WaitFor(t, "every connection ended", func() bool { return pr.b.srv.Active() == 0 && be.Conns() == 0 })
	testkit.WaitFor(t, "descriptors back to the base", func() bool { return openFDs(t) <= base })
}

// TestHandoffUnmovableGet1012: connections that cannot move (the
// goroutine splice, TLS 1.2, a close already scheduled) each get a close frame 1012, never a bare TCP
// close, at times evenly spread over the window: the plan Handoff
// computed is in order and reaches the window's second half.
func TestHandoffUnmovableGet1012(t *testing.T) {
	const k = 6
	const window = 600 * time.Millisecond
	for _, tc := range []struct {
		name string
		cfg  edgeConfig
	}{
		{"goroutines", edgeConfig{splice: spliceGoroutines}},
		{"tls12", edgeConfig{tls: true}},
		{"closing", edgeConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := startBackend(t, "b1")
			pr := startPair(t, be.Addr(), nil, tc.cfg)
			var cs []*websocket.Conn
			for range k {
				var c *websocket.Conn
				if tc.name == "tls12" {
					// TLS 1.2 stays with crypto/tls, whose record state
					// cannot move.
					d := pr.a.dialer()
					d.TLSClientConfig.MaxVersion = tls.VersionTLS12
					var err error
					if c, _, err = d.Dial(pr.a.url("/"), nil); err != nil {
						t.Fatal(err)
					}
				} else {
					c, _ = pr.a.dialWS(t, "/", nil)
				}
				testkit.Ask(t, c, "hi")
				cs = append(cs, c)
			}
			if tc.name == "closing" {
				// Asked to close within the hour: it does not move, and
				// its close comes within the hand-off's window instead.
				pr.a.srv.CloseConnsOn(pr.poolA.Balancer.Snapshot().ByID("b1"), CloseServiceRestart, time.Hour, ReasonAdminDrain)
			}
			pr.a.srv.testHandoff = &handoffHooks{} // records the plan
			codes := make(chan int, k)
			for _, c := range cs {
				go func() {
					c.SetReadDeadline(time.Now().Add(30 * time.Second))
					_, _, err := c.ReadMessage()
					c.Close()
					ce, ok := err.(*websocket.CloseError)
					if !ok {
						codes <- -1
						return
					}
					codes <- ce.Code
				}()
			}
			moved, closed, adopted := pr.handoff(t, window)
			if moved != 0 || closed != k || adopted != 0 {
				t.Fatalf("moved %d closed %d adopted %d, want 0 %d 0", moved, closed, adopted, k)
			}
			for range k {
				if code := <-codes; code != CloseServiceRestart {
					t.Errorf("client got %d, want a close frame 1012", code)
				}
			}
			pr.a.srv.reg.mu.Lock()
			plan := append([]time.Duration(nil), pr.a.srv.testHandoff.plan...)
			pr.a.srv.reg.mu.Unlock()
			if len(plan) != k {
				t.Fatalf("plan of %d closes, want %d", len(plan), k)
			}
			late := 0
			for i, d := range plan {
				if i > 0 && d < plan[i-1] || d < 0 || d >= window {
					t.Errorf("plan %v: not in order inside the window", plan)
				}
				if d >= window/2 {
					late++
				}
			}
			if late == 0 || late == k {
				t.Errorf("plan %v: not spread over the window", plan)
			}
		})
	}
}

// TestHandoffRefusesMalformed: a record B cannot read is refused, its
// descriptors are closed (the test's other ends see end of file), and
// the next message, a real connection from A, is adopted.
func TestHandoffRefusesMalformed(t *testing.T) {
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{})
	c, _ := pr.a.dialWS(t, "/", nil)
	testkit.Ask(t, c, "before")

	// Two socketpairs stand in for the sockets; their far ends stay here.
	mk := func() (sent int, kept *net.UnixConn) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fds[1]), "kept")
		defer f.Close()
		k, _ := net.FileConn(f)
		t.Cleanup(func() { k.Close() })
		return fds[0], k.(*net.UnixConn)
	}
	s1, k1 := mk()
	s2, k2 := mk()
	bad, _ := handoff.Encode(&handoff.State{Pool: "chat", BackendID: "b1", Session: []byte{99}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		n, err := pr.b.srv.Adopt(ctx, pr.ub)
		if err != nil {
			t.Errorf("Adopt: %v", err)
		}
		done <- n
	}()
	if err := handoff.Send(pr.ua, bad, s1, s2); err != nil {
		t.Fatal(err)
	}
	unix.Close(s1)
	unix.Close(s2)
	if ok, err := handoff.ReadAck(pr.ua); err != nil || ok {
		t.Fatalf("ack of a malformed record: %v %v, want refused", ok, err)
	}
	for _, k := range []*net.UnixConn{k1, k2} {
		k.SetReadDeadline(time.Now().Add(30 * time.Second))
		var b [1]byte
		if n, err := k.Read(b[:]); n != 0 || err == nil {
			t.Fatalf("refused descriptor still open: %d %v", n, err)
		}
	}
	moved, _, err := pr.a.srv.Handoff(ctx, pr.ua, time.Second)
	if err != nil || moved != 1 {
		t.Fatalf("Handoff after the malformed record: moved %d, %v", moved, err)
	}
	pr.ua.CloseWrite()
	if n := <-done; n != 1 {
		t.Fatalf("adopted %d, want 1", n)
	}
	if got := testkit.Ask(t, c, "after"); got != "after" {
		t.Fatalf("after the hand-off: %q", got)
	}
}

// TestHandoffMidFrame: a connection whose backend sent half of a large
// frame moves; the rest of the frame arrives intact through B, and a
// drain in B puts its close 1001 right after that frame, not inside it.
func TestHandoffMidFrame(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	frame := binary.BigEndian.AppendUint64([]byte{0x82, 127}, uint64(len(payload)))
	frame = append(frame, payload...)
	half := len(frame) / 2
	rest := make(chan struct{})
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, resp := testkit.ReadUpgrade(t, br)
		c.Write([]byte(resp))
		c.Write(frame[:half])
		<-rest
		c.Write(frame[half:])
		c.Read(make([]byte, 1024)) // until the client's close reply or the end
	})
	pr := startPair(t, addr, nil, edgeConfig{})
	conn := pr.a.rawConn(t)
	conn.Write([]byte(testkit.RawUpgrade("/", "x")))
	br := testkit.Read101(t, conn)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, half)
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatalf("first half: %v", err)
	}
	testkit.WaitFor(t, "A relayed the first half", func() bool { return pr.a.srv.Active() == 1 })
	if moved, _, _ := pr.handoff(t, time.Second); moved != 1 {
		t.Fatalf("moved %d, want 1", moved)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pr.b.srv.Drain(ctx, 0)
	}()
	testkit.WaitFor(t, "B asked for the close", func() bool { return pr.b.srv.ClosePending() == 1 })
	close(rest)
	tail := make([]byte, len(frame)-half)
	if _, err := io.ReadFull(br, tail); err != nil {
		t.Fatalf("second half: %v", err)
	}
	if !bytes.Equal(append(got, tail...), frame) {
		t.Fatal("the frame did not arrive intact")
	}
	op2, p2 := testkit.ReadFrame(t, br)
	if op2 != 0x8 || len(p2) < 2 || int(p2[0])<<8|int(p2[1]) != CloseGoingAway {
		t.Fatalf("after the frame: opcode %#x payload %x, want close 1001", op2, p2)
	}
	conn.Close()
	<-drained
}

// TestHandoffPings: in frame-aware mode pings keep flowing after the
// move, and a client that answers nothing still hits its ping timeout,
// in B.
func TestHandoffPings(t *testing.T) {
	be := startBackend(t, "b1")
	tune := func(p *Pool) {
		// A ping timeout the answering client meets on a slow machine; the
		// mute one is reaped after it all the same.
		p.PingInterval, p.PingTimeout, p.LingerTimeout = 100*time.Millisecond, 3*time.Second, 200*time.Millisecond
	}
	pr := startPair(t, be.Addr(), tune, edgeConfig{})
	live, _ := pr.a.dialWS(t, "/", nil)
	pings := make(chan struct{}, 100)
	live.SetPingHandler(func(string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return live.WriteControl(websocket.PongMessage, nil, time.Now().Add(time.Second))
	})
	go func() {
		for {
			if _, _, err := live.ReadMessage(); err != nil {
				return
			}
		}
	}()
	mute := pr.a.rawConn(t)
	mute.Write([]byte(testkit.RawUpgrade("/", "x")))
	testkit.Read101(t, mute)
	testkit.WaitFor(t, "both through A", func() bool { return pr.a.srv.Active() == 2 })
	if moved, _, _ := pr.handoff(t, time.Second); moved != 2 {
		t.Fatalf("moved %d, want 2", moved)
	}
	for len(pings) > 0 {
		<-pings
	}
	for range 3 {
		select {
		case <-pings:
		case <-time.After(5 * time.Second):
			t.Fatal("no ping after the hand-off")
		}
	}
	for {
		if r := pr.b.obs.waitClosed(t); r == string(ReasonPingTimeout) {
			break
		}
	}
	if got := pr.b.srv.Active(); got != 1 {
		t.Fatalf("B holds %d, want the live client only", got)
	}
	live.Close()
}

// TestHandoffNodeWSKeepsEchoing: 50 connections of Node's `ws` client, a
// client edge did not write, echo across the hand-off from A to B and see
// no close or error event until they close themselves.
func TestHandoffNodeWSKeepsEchoing(t *testing.T) {
	t.Run("ws", func(t *testing.T) { nodeAcrossHandoff(t, false) })
	// wss: Node's OpenSSL checks every record B protects after A's.
	t.Run("wss", func(t *testing.T) { nodeAcrossHandoff(t, true) })
}

func nodeAcrossHandoff(t *testing.T, tlsOn bool) {
	const n = 50
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{tls: tlsOn})
	args := []string{pr.a.url("/"), strconv.Itoa(n)}
	if tlsOn {
		ca := filepath.Join(t.TempDir(), "ca.pem")
		testkit.WriteFile(t, ca, pr.a.certPEM)
		args = append(args, ca, "edge.test")
	}
	cmd := interop.Node(t, interopCtx(t), "testdata/wsecho.js", args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "echoing" {
		t.Fatalf("wsecho.js: %q %v\n%s", out.Text(), out.Err(), stderr.String())
	}
	testkit.WaitFor(t, "every connection in A", func() bool { return pr.a.srv.Active() == n })
	pr.a.srv.testHandoff = &handoffHooks{sender: handoff.Options{RetryFor: 15 * time.Second}} // busy clients, as in handoffKeepsEchoing
	if moved, closed, adopted := pr.handoff(t, time.Second); moved != n || closed != 0 || adopted != n {
		t.Fatalf("moved %d closed %d adopted %d, want %d 0 %d", moved, closed, adopted, n, n)
	}
	io.WriteString(stdin, "stop\n")
	if !out.Scan() {
		t.Fatalf("wsecho.js printed no result: %v\n%s", out.Err(), stderr.String())
	}
	var r struct {
		Conns, Messages, Unexpected int
		Error                       string
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("wsecho.js printed %q: %v", out.Text(), err)
	}
	cmd.Wait()
	if r.Unexpected != 0 || r.Error != "" {
		t.Fatalf("the ws client noticed: %d close/error events, %q", r.Unexpected, r.Error)
	}
	if r.Messages < 4*n {
		t.Fatalf("%d messages, want at least %d", r.Messages, 4*n)
	}
	testkit.WaitFor(t, "B ended every connection", func() bool { return pr.b.srv.Active() == 0 })
}

// TestHandoffPoolGone: a connection whose pool is not in B (renamed in
// the new configuration) is still adopted, counted, and sent a close
// 1012 at its next frame boundary; its access line says backend_gone.
func TestHandoffPoolGone(t *testing.T) {
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{})
	pr.poolB.Name = "renamed"
	if err := pr.b.srv.SetRoutes([]Route{{Default: true, Pool: pr.poolB}}); err != nil {
		t.Fatal(err)
	}
	c, _ := pr.a.dialWS(t, "/", nil)
	testkit.Ask(t, c, "before")
	if moved, _, adopted := pr.handoff(t, time.Second); moved != 1 || adopted != 1 {
		t.Fatalf("moved %d adopted %d, want 1 1", moved, adopted)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _, err := c.ReadMessage()
	if ce, ok := err.(*websocket.CloseError); !ok || ce.Code != CloseServiceRestart {
		t.Fatalf("got %v, want a close frame 1012", err)
	}
	c.Close()
	if r := pr.b.obs.waitClosed(t); r != string(ReasonBackendGone) {
		t.Fatalf("B closed it for %q, want %q", r, ReasonBackendGone)
	}
	if got := pr.poolB.Balancer.Snapshot().ByID("b1").Active(); got != 0 {
		t.Fatalf("B's backend of another pool counts %d", got)
	}
}

// TestHandoffTLS13RestedHalfRecord: a TLS 1.3 connection that rested (its
// ciphers dropped) and holds the first half of a client record moves; the
// second half, sent after the move, completes the record in B, whose
// answer the client's crypto/tls reads under the keys and sequence
// numbers A left.
func TestHandoffTLS13RestedHalfRecord(t *testing.T) {
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{tls: true})
	rc := dialRecordClient(t, pr.a.addr, pr.a.certs, nil)
	tc, br, w := rc.tc, rc.br, rc.w
	testkit.WaitFor(t, "A resting the connection's ciphers", func() bool {
		return pr.a.srv.recordConns() == 1 && pr.a.srv.restedConns() == 1
	})
	rec := w.seal(nil, 23, testkit.MaskedFrame(0x2, []byte("half-moved")))
	half := len(rec) / 2
	if _, err := tc.Write(rec[:half]); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "A holding the first half of the record", func() bool { return pr.a.srv.recordTails() == half })
	if moved, closed, adopted := pr.handoff(t, time.Second); moved != 1 || closed != 0 || adopted != 1 {
		t.Fatalf("moved %d closed %d adopted %d, want 1 0 1", moved, closed, adopted)
	}
	if n := pr.b.srv.recordConns(); n != 1 {
		t.Fatalf("B protects the records of %d connections, want 1", n)
	}
	if _, err := tc.Write(rec[half:]); err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if op, p := testkit.ReadFrame(t, br); op != 0x2 || string(p) != "half-moved" {
		t.Fatalf("echo through B: opcode %#x %q", op, p)
	}
}

// TestAdoptSharesStandIns: the connections one Adopt takes whose pool or
// backend is not here share one stand-in pool and one stand-in backend
// per name (which then counts them all), and one ListenerOptions per
// listener name, rather than compiling their own each; a pool and
// backend that are here are themselves.
func TestAdoptSharesStandIns(t *testing.T) {
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{})
	s := pr.b.srv
	var sh adoptShared
	gone := &handoff.State{Pool: "renamed", BackendID: "b1", BackendAddr: be.Addr()}
	p1, b1, why1 := s.adoptTarget(gone, &sh)
	p2, b2, why2 := s.adoptTarget(gone, &sh)
	if p1 != p2 || b1 != b2 || b1 == nil || why1 != ReasonBackendGone || why2 != ReasonBackendGone {
		t.Fatalf("stand-ins %p %p, %p %p (%q %q), want one pool and one backend, backend_gone", p1, p2, b1, b2, why1, why2)
	}
	left := &handoff.State{Pool: "chat", BackendID: "b9", BackendAddr: "127.0.0.1:9"}
	p3, b3, _ := s.adoptTarget(left, &sh)
	if _, b4, _ := s.adoptTarget(left, &sh); b3 != b4 || b3 == b1 || p3.name != "chat" {
		t.Fatalf("a gone backend of a pool that is here: %p %p (pool %q)", b3, b4, p3.name)
	}
	here := &handoff.State{Pool: "chat", BackendID: "b1", BackendAddr: be.Addr()}
	if _, b, why := s.adoptTarget(here, &sh); b != pr.poolB.Balancer.Snapshot().ByID("b1") || why != "" {
		t.Fatalf("the backend that is here: %p %q", b, why)
	}
	if a, b := sh.listener("public"), sh.listener("public"); a != b || a.Name != "public" || sh.listener("admin") == a {
		t.Fatal("listener options not shared by name")
	}
}

// TestAdoptCountsOverLimits: an adopted connection is admitted by the
// one admission, which counts it against B's client, pool and server
// limits but never refuses it and spends no token of a rate: B takes
// all three connections of one client although its pool allows two per
// client, two in all and one new connection a minute. B then refuses
// that client's next connection (it holds three), and once the adopted
// ones end, their counts are given back and the next one is admitted.
func TestAdoptCountsOverLimits(t *testing.T) {
	const n = 3
	be := startBackend(t, "b1")
	pr := startPair(t, be.Addr(), nil, edgeConfig{})
	pr.poolB.MaxConns = 2
	pr.poolB.Limiter = balance.NewLimiter(balance.LimiterOptions{MaxConnsPerIP: 2})
	pr.poolB.Admission = balance.NewBucket(1.0/60, 1, nil)
	if err := pr.b.srv.SetRoutes([]Route{{Default: true, Pool: pr.poolB}}); err != nil {
		t.Fatal(err)
	}
	var cs []*websocket.Conn
	for range n {
		c, _ := pr.a.dialWS(t, "/", nil)
		testkit.Ask(t, c, "before")
		cs = append(cs, c)
	}
	if moved, closed, adopted := pr.handoff(t, time.Second); moved != n || closed != 0 || adopted != n {
		t.Fatalf("moved %d closed %d adopted %d, want %d 0 %d", moved, closed, adopted, n, n)
	}
	for i, c := range cs {
		if got := testkit.Ask(t, c, "after"); got != "after" {
			t.Fatalf("client %d after the hand-off: %q", i, got)
		}
	}
	if _, resp, err := pr.b.dialer().Dial(pr.b.url("/"), nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a fourth connection of the client: %v, want 503", err)
	}
	lines := accessLines(t, pr.logB)
	if got := lines[len(lines)-1]["reason"]; got != "client_max_conns" {
		t.Fatalf("the fourth connection refused for %q, want client_max_conns", got)
	}
	for _, c := range cs {
		c.Close()
	}
	testkit.WaitFor(t, "B holding none", func() bool { return pr.b.srv.Active() == 0 })
	pr.b.dialWS(t, "/", nil)
}

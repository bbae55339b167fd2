package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// accessAttrs returns the attributes of access record i as strings.
func (l *logCounter) attrs(i int) map[string]slog.Value {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]slog.Value{}
	l.recs[i].Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Resolve(); return true })
	return m
}

// lastKind returns the attributes of the last access record of kind k.
// loggedID waits for an access line of kind k whose request_id is id: the
// line is written once the answer has gone, so the client may read the
// answer before it exists.
// It returns the line's attributes.
func (l *logCounter) loggedID(t *testing.T, k, id string) map[string]slog.Value {
	t.Helper()
	var line map[string]slog.Value
	found := func() bool {
		for i := l.count() - 1; i >= 0; i-- {
			if a := l.attrs(i); a["kind"].String() == k && a["request_id"].String() == id {
				line = a
				return true
			}
		}
		return false
	}
	testkit.WaitFor(t, "the access line with request_id "+id, found)
	return line
}

func (l *logCounter) lastKind(t *testing.T, k string) map[string]slog.Value {
	t.Helper()
	for i := l.count() - 1; i >= 0; i-- {
		if a := l.attrs(i); a["kind"].String() == k {
			return a
		}
	}
	t.Fatalf("no %s access line among %d", k, l.count())
	return nil
}

// generatedID is the shape of a request id edge makes up.
var generatedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestAccessLogEdgeClose1009: the access line of a WebSocket that edge
// closed with 1009 (a client frame over MaxFrameBytes) names the code, the
// side that closed, the time to the 101, the TLS version, the duration in
// seconds as a float and a request id; the close reached the Observer too.
func TestAccessLogEdgeClose1009(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		lc := &logCounter{}
		e, _ := oneBackendEdge(t, sp, true, func(p *Pool, cfg *edgeConfig) {
			p.MaxFrameBytes = 100
			cfg.opts.AccessLog = slog.New(lc)
		})
		c, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c, "x")
		if err := c.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte{'b'}, 101)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, _, err := c.ReadMessage(); closeCodeOf(err) != CloseMessageTooBig {
			t.Fatalf("got %v, want close 1009", err)
		}
		c.Close()
		if got := e.obs.waitClosed(t); got != "frame_too_big" {
			t.Fatalf("reason %q", got)
		}
		a := lc.lastKind(t, "ws")
		if got := a["close_code"].String(); got != "1009" {
			t.Errorf("close_code: got %q, want 1009 (%v)", got, a)
		}
		if got := a["close_side"].String(); got != "edge" {
			t.Errorf("close_side: got %q, want edge (%v)", got, a)
		}
		for _, k := range []string{"dur_s", "upgrade_s"} {
			v, ok := a[k]
			if !ok || v.Kind() != slog.KindFloat64 || v.Float64() <= 0 {
				t.Errorf("%s: got %v (kind %v), want a positive float of seconds", k, v, v.Kind())
			}
		}
		if u, d := a["upgrade_s"], a["dur_s"]; u.Kind() == slog.KindFloat64 && d.Kind() == slog.KindFloat64 && u.Float64() > d.Float64() {
			t.Errorf("upgrade_s %v after dur_s %v", a["upgrade_s"], a["dur_s"])
		}
		if _, ok := a["dur"]; ok {
			t.Errorf("the nanosecond dur field is still there: %v", a)
		}
		if got := a["tls"].String(); got != "TLS 1.3" {
			t.Errorf("tls: got %q, want TLS 1.3", got)
		}
		if id := a["request_id"].String(); !generatedID.MatchString(id) {
			t.Errorf("request_id: got %q, want 32 hex digits", id)
		}
		e.obs.mu.Lock()
		closes := append([]string(nil), e.obs.closes...)
		e.obs.mu.Unlock()
		if len(closes) != 1 || closes[0] != "edge 1009" {
			t.Errorf("Observer closes: got %q, want [edge 1009]", closes)
		}
	})
}

// TestAccessLogCloseSides: a close frame from the client (frame-aware
// mode follows client frames) and one from the backend (backend frames
// are always followed) are attributed to their side with their code.
func TestAccessLogCloseSides(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		lc := &logCounter{}
		e, _ := oneBackendEdge(t, sp, false, func(p *Pool, cfg *edgeConfig) {
			p.MaxMessageBytes = 1 << 20
			cfg.opts.AccessLog = slog.New(lc)
		})
		c, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c, "x")
		msg := websocket.FormatCloseMessage(4001, "bye")
		if err := c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		c.ReadMessage() // the backend's echo
		c.Close()
		e.obs.waitClosed(t)
		a := lc.lastKind(t, "ws")
		if a["close_side"].String() != "client" || a["close_code"].String() != "4001" {
			t.Errorf("client close: got side %v code %v", a["close_side"], a["close_code"])
		}

		// The test backend closes with the code it is told.
		c2, _ := e.dialWS(t, "/", nil)
		c2.SetReadDeadline(time.Now().Add(30 * time.Second))
		if err := c2.WriteMessage(websocket.TextMessage, []byte("close:4002")); err != nil {
			t.Fatal(err)
		}
		_, _, err := c2.ReadMessage()
		c2.Close()
		e.obs.waitClosed(t)
		a = lc.lastKind(t, "ws")
		if a["close_side"].String() != "backend" || a["close_code"].String() != "4002" || closeCodeOf(err) != 4002 {
			t.Errorf("backend close: got side %v code %v, client saw %v", a["close_side"], a["close_code"], err)
		}
	})
}

// TestRequestIDKeptAndPassed: a valid X-Request-Id from a trusted proxy
// reaches the backend once, on the plain and the WebSocket leg, and is
// logged; a lookalike spelling cannot smuggle a second one.
func TestRequestIDKeptAndPassed(t *testing.T) {
	lc := &logCounter{}
	e, _ := oneBackendEdge(t, spliceReadiness, false, func(_ *Pool, cfg *edgeConfig) {
		cfg.opts.AccessLog = slog.New(lc)
		cfg.lo.TrustedProxies = mustPrefixes("127.0.0.0/8")
	})
	req, _ := http.NewRequest("GET", e.httpURL("/headers"), nil)
	req.Header["X-Request-Id"] = []string{"abc-123.XYZ"}
	req.Header["X_Request_Id"] = []string{"smuggled"}
	h := getHeaders(t, e, req)
	if got := h["X-Request-Id"]; len(got) != 1 || got[0] != "abc-123.XYZ" {
		t.Errorf("backend X-Request-Id: got %q, want [abc-123.XYZ]", got)
	}
	for k := range h {
		if k != "X-Request-Id" && foldsTo(k, "X-Request-Id") {
			t.Errorf("lookalike %q reached the backend: %q", k, h[k])
		}
	}
	lc.loggedID(t, "http", "abc-123.XYZ")

	c, _ := e.dialWS(t, "/", http.Header{"X-Request-Id": {"ws-id-1"}})
	if got := testkit.AskHeaders(t, c)["X-Request-Id"]; len(got) != 1 || got[0] != "ws-id-1" {
		t.Errorf("ws backend X-Request-Id: got %q", got)
	}
	c.Close()
	e.obs.waitClosed(t)
	if got := lc.lastKind(t, "ws")["request_id"].String(); got != "ws-id-1" {
		t.Errorf("ws logged request_id: got %q", got)
	}
}

// TestRequestIDOfUntrustedPeerReplaced: a client that is no trusted proxy
// does not choose its request id (it could collide with real ones or
// confuse the logs): curl's X-Request-Id and a WebSocket client's are
// replaced by a generated id, which is what the backend gets and the log
// line's request_id; the client's value is logged apart, as
// client_request_id.
func TestRequestIDOfUntrustedPeerReplaced(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	lc := &logCounter{}
	e, _ := oneBackendEdge(t, spliceReadiness, false, func(_ *Pool, cfg *edgeConfig) {
		cfg.opts.AccessLog = slog.New(lc)
		cfg.lo.TrustedProxies = mustPrefixes("10.0.0.0/8") // not the test's loopback peer
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "curl", "-sS", "--fail", "-H", "X-Request-Id: chosen-by-client", e.httpURL("/headers")).Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	var h map[string][]string
	if err := json.Unmarshal(out, &h); err != nil {
		t.Fatalf("backend headers %q: %v", out, err)
	}
	got := h["X-Request-Id"]
	if len(got) != 1 || !generatedID.MatchString(got[0]) {
		t.Fatalf("backend X-Request-Id: got %q, want one generated id instead of the client's", got)
	}
	a := lc.loggedID(t, "http", got[0])
	if c := a["client_request_id"].String(); c != "chosen-by-client" {
		t.Errorf("client_request_id: got %q, want the client's value", c)
	}

	c, _ := e.dialWS(t, "/", http.Header{"X-Request-Id": {"ws-chosen"}})
	got = testkit.AskHeaders(t, c)["X-Request-Id"]
	if len(got) != 1 || !generatedID.MatchString(got[0]) {
		t.Errorf("ws backend X-Request-Id: got %q, want a generated id", got)
	}
	c.Close()
	e.obs.waitClosed(t)
	a = lc.lastKind(t, "ws")
	if a["request_id"].String() != got[0] || a["client_request_id"].String() != "ws-chosen" {
		t.Errorf("ws access line: request_id %v client_request_id %v, want %s and ws-chosen", a["request_id"], a["client_request_id"], got)
	}
}

// TestRequestIDGenerated: without an X-Request-Id, or with one that is too
// long or not visible ASCII, edge makes one up, logs it and sends it.
func TestRequestIDGenerated(t *testing.T) {
	lc := &logCounter{}
	e, _ := oneBackendEdge(t, spliceReadiness, false, func(_ *Pool, cfg *edgeConfig) { cfg.opts.AccessLog = slog.New(lc) })
	for _, in := range []string{"", strings.Repeat("a", 201), "has space", "caf\xc3\xa9"} {
		req, _ := http.NewRequest("GET", e.httpURL("/headers"), nil)
		if in != "" {
			req.Header["X-Request-Id"] = []string{in}
		}
		h := getHeaders(t, e, req)
		got := h["X-Request-Id"]
		if len(got) != 1 || !generatedID.MatchString(got[0]) {
			t.Errorf("in %q: backend X-Request-Id %q, want one generated id", in, got)
			continue
		}
		lc.loggedID(t, "http", got[0]) // the id the backend got is the one logged
	}
	c, _ := e.dialWS(t, "/", nil)
	got := testkit.AskHeaders(t, c)["X-Request-Id"]
	if len(got) != 1 || !generatedID.MatchString(got[0]) {
		t.Errorf("ws backend X-Request-Id: got %q", got)
	}
}

func getHeaders(t *testing.T, e *edge, req *http.Request) map[string][]string {
	t.Helper()
	resp, err := e.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h map[string][]string
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("headers JSON: %v", err)
	}
	return h
}

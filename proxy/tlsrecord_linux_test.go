package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// recordSizes crosses every record boundary that matters: tiny, one byte
// under, at and over a full 16 KiB record (RFC 8446 §5.1), and 1 MiB.
var recordSizes = []int{1, 100, 16<<10 - 20, 16 << 10, 16<<10 + 1, 1 << 20}

// pattern is the message the scripts under testdata send for size n at
// index i.
func pattern(n, i int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(k*31 + i)
	}
	return b
}

func recordEdge(t *testing.T) *edge {
	t.Helper()
	e, _ := oneBackendEdge(t, spliceReadiness, true, nil)
	return e
}

// TestRecordLayerGoClient: Go's TLS 1.3 client echoes messages of every
// size through edge's record layer, before and after the connection
// rested (its ciphers dropped and rebuilt).
func TestRecordLayerGoClient(t *testing.T) {
	e := recordEdge(t)
	c, _ := e.dialWS(t, "/", nil)
	defer c.Close()
	echo := func(round int) {
		for i, n := range recordSizes {
			msg := pattern(n, i+round)
			if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("size %d: %v", n, err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("size %d: echo differs (%d bytes back)", n, len(got))
			}
		}
	}
	echo(0)
	if n := e.srv.recordConns(); n != 1 {
		t.Fatalf("%d connections on the record layer, want 1", n)
	}
	testkit.WaitFor(t, "the idle connection to drop its ciphers", func() bool { return e.srv.restedConns() == 1 })
	echo(1)
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 1 || kept != 0 {
		t.Fatalf("takeovers: owned %d, kept %d; want 1, 0", owned, kept)
	}
}

// TestRecordLayerTLS12StaysOnCryptoTLS: a TLS 1.2 client is spliced with
// crypto/tls's records, readiness-driven all the same.
func TestRecordLayerTLS12StaysOnCryptoTLS(t *testing.T) {
	e := recordEdge(t)
	d := e.dialer()
	d.TLSClientConfig.MaxVersion = tls.VersionTLS12
	c, _, err := d.Dial(e.url("/"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := testkit.Ask(t, c, "twelve"); got != "twelve" {
		t.Fatalf("echo %q", got)
	}
	testkit.WaitFor(t, "the readiness splice to take the connection", func() bool { return e.srv.readyConns() == 1 })
	if n := e.srv.recordConns(); n != 0 {
		t.Fatalf("a TLS 1.2 connection is on the record layer")
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 0 || kept != 1 {
		t.Fatalf("takeovers: owned %d, kept %d; want 0, 1", owned, kept)
	}
}

// TestRecordLayerBadRecordAlert: a client record whose tag does not
// verify is answered with bad_record_mac (RFC 8446 §5.2) and the
// connection ends; crypto/tls on the client reads the alert.
func TestRecordLayerBadRecordAlert(t *testing.T) {
	e := recordEdge(t)
	rc := dialRecordClient(t, e.addr, e.certs, nil)
	tc, br, w := rc.tc, rc.br, rc.w
	testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
	rec := w.seal(nil, 23, testkit.MaskedFrame(0x2, []byte("tampered")))
	rec[len(rec)-1] ^= 1
	if _, err := tc.Write(rec); err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.ReadAll(br)
	if err == nil || !strings.Contains(err.Error(), "bad record MAC") {
		t.Fatalf("client read %v, want the alert bad_record_mac", err)
	}
	if got := e.obs.waitClosed(t); got == "" {
		t.Fatal("no close reason")
	}
}

// wssResult is the JSON line of testdata/wssecho.js and wsschromium.js.
type wssResult struct {
	Echoed int    `json:"echoed"`
	Error  string `json:"error"`
}

func runWSS(t *testing.T, cmd *exec.Cmd) wssResult {
	t.Helper()
	var r wssResult
	runJSON(t, cmd, &r)
	return r
}

func sizeArgs() []string {
	var s []string
	for _, n := range recordSizes {
		s = append(s, strconv.Itoa(n))
	}
	return s
}

// TestRecordLayerNodeWS: Node's ws over TLS (OpenSSL underneath) echoes
// every size through the record layer.
func TestRecordLayerNodeWS(t *testing.T) {
	e := recordEdge(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	testkit.WriteFile(t, ca, e.certPEM)
	args := append([]string{e.url("/"), ca, "edge.test"}, sizeArgs()...)
	r := runWSS(t, interop.Node(t, interopCtx(t), "testdata/wssecho.js", args...))
	if r.Error != "" || r.Echoed != len(recordSizes) {
		t.Fatalf("Node ws: %d echoes, error %q", r.Echoed, r.Error)
	}
	if owned, _ := e.srv.RecordLayerTakeovers(); owned != 1 {
		t.Fatalf("%d connections on the record layer, want 1", owned)
	}
}

// TestRecordLayerChromium: the same from headless Chromium (BoringSSL).
func TestRecordLayerChromium(t *testing.T) {
	e := recordEdge(t)
	exe := interop.Chromium(t)
	args := append([]string{exe, e.url("/")}, sizeArgs()...)
	r := runWSS(t, interop.Node(t, interopCtx(t), "testdata/wsschromium.js", args...))
	if r.Error != "" || r.Echoed != len(recordSizes) {
		t.Fatalf("Chromium: %d echoes, error %q", r.Echoed, r.Error)
	}
	if owned, _ := e.srv.RecordLayerTakeovers(); owned != 1 {
		t.Fatalf("%d connections on the record layer, want 1", owned)
	}
}

// TestRecordLayerOpenSSLKeyUpdate: openssl s_client sends KeyUpdate with
// and without update_requested (its K and k commands) in the middle of a
// WebSocket; edge's record layer follows the client's new keys, answers
// the request with a KeyUpdate of its own (RFC 8446 §4.6.3; s_client -msg
// shows it arrive) and the echo goes on under the new keys both ways.
func TestRecordLayerOpenSSLKeyUpdate(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("EDGE_REQUIRE_INTEROP") == "1" {
			t.Fatal("openssl not found")
		}
		t.Skip("openssl not found")
	}
	e := recordEdge(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "s_client", "-connect", e.addr, "-servername", "edge.test", "-tls1_3", "-msg")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	out := &lineWaiter{r: bufio.NewReader(pr)}
	out.await(t, "CONNECTED")
	io.WriteString(stdin, testkit.RawUpgrade("/", "edge.test"))
	out.await(t, "101 Switching Protocols")
	stdin.Write(testkit.MaskedFrame(0x1, []byte("before-update\n")))
	out.await(t, "before-update")
	io.WriteString(stdin, "K\n")
	out.await(t, "KEYUPDATE")
	// The answer: a KeyUpdate from edge, shown by -msg as received.
	out.await(t, "<<< TLS 1.3, Handshake [length 0005], KeyUpdate")
	stdin.Write(testkit.MaskedFrame(0x1, []byte("after-update\n")))
	out.await(t, "after-update")
	io.WriteString(stdin, "k\n")
	out.await(t, "KEYUPDATE")
	stdin.Write(testkit.MaskedFrame(0x1, []byte("after-second\n")))
	out.await(t, "after-second")
	if n := e.srv.recordConns(); n != 1 {
		t.Fatalf("%d connections on the record layer, want 1", n)
	}
}

// lineWaiter reads a process's output until a line contains a string.
type lineWaiter struct {
	r    *bufio.Reader
	seen []string
}

func (w *lineWaiter) await(t *testing.T, s string) {
	t.Helper()
	for {
		line, err := w.r.ReadString('\n')
		w.seen = append(w.seen, line)
		if strings.Contains(line, s) {
			return
		}
		if err != nil {
			t.Fatalf("no %q in the output:\n%s", s, strings.Join(w.seen, ""))
		}
	}
}

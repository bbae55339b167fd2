package proxy

import (
	"bufio"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/interop"
)

// nodeBackend is testdata/deflatebackend.js: a Node ws backend with
// permessage-deflate, context takeover and a 128 MiB maxPayload, whose
// events come back as JSON lines.
type nodeBackend struct {
	addr string

	mu       sync.Mutex
	upgrades []backendUpgrade
	largest  int64 // the largest message it received, inflated
	messages int
	events   chan backendEvent
}

type backendUpgrade struct{ Offer, Answer string }

type backendEvent struct {
	Event  string `json:"event"`
	Port   int    `json:"port"`
	Offer  string `json:"offer"`
	Answer string `json:"answer"`
	Size   int64  `json:"size"`
	Code   int    `json:"code"`
	Error  string `json:"error"`
}

func startNodeBackend(t *testing.T) *nodeBackend {
	t.Helper()
	cmd := interop.Node(t, interopCtx(t), "testdata/deflatebackend.js")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the Node ws backend: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	b := &nodeBackend{events: make(chan backendEvent, 1024)}
	listening := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev backendEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			b.mu.Lock()
			switch ev.Event {
			case "listening":
				listening <- ev.Port
			case "upgrade":
				b.upgrades = append(b.upgrades, backendUpgrade{ev.Offer, ev.Answer})
			case "message":
				b.messages++
				b.largest = max(b.largest, ev.Size)
			}
			b.mu.Unlock()
			select {
			case b.events <- ev:
			default:
			}
		}
	}()
	select {
	case port := <-listening:
		b.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	case <-interopCtx(t).Done():
		t.Fatal("the Node ws backend did not listen")
	}
	return b
}

// upgrade returns the backend's only handshake.
func (b *nodeBackend) upgrade(t *testing.T) backendUpgrade {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.upgrades) != 1 {
		t.Fatalf("backend saw %d upgrades, want 1", len(b.upgrades))
	}
	return b.upgrades[0]
}

func (b *nodeBackend) stats() (largest int64, messages int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.largest, b.messages
}

// deflateEdge is an edge over b whose pool has the deflate policy pol,
// window cap bits and message limit maxMsg.
func deflateEdge(t *testing.T, sp splicePath, b *nodeBackend, pol DeflatePolicy, bits int, maxMsg int64) *edge {
	t.Helper()
	p := newPool(t, "deflate", balance.LeastConn, map[string]string{"b": b.addr})
	p.MaxMessageBytes = maxMsg
	p.Deflate, p.DeflateMaxWindowBits = pol, bits
	return startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
}

type deflateResult struct {
	Answer     string `json:"answer"`
	Extensions string `json:"extensions"`
	Echoed     int    `json:"echoed"`
	Size       int    `json:"size"`
	Code       int    `json:"code"`
	Reason     string `json:"reason"`
	Error      string `json:"error"`
}

// deflateClients are the clients we did not write, each echoing one
// compressible message of n bytes through url; the result's Answer is
// what the client saw of the extension answer (Chromium: its
// WebSocket.extensions).
var deflateClients = []struct {
	name string
	run  func(t *testing.T, url string, n int) deflateResult
}{
	{"node-ws", func(t *testing.T, url string, n int) deflateResult {
		var r deflateResult
		runJSON(t, interop.Node(t, interopCtx(t), "testdata/deflateclient.js", url, "echo", strconv.Itoa(n)), &r)
		return r
	}},
	{"chromium", func(t *testing.T, url string, n int) deflateResult {
		var r deflateResult
		runJSON(t, interop.Node(t, interopCtx(t), "testdata/deflatechromium.js", interop.Chromium(t), url, strconv.Itoa(n)), &r)
		r.Answer = r.Extensions
		return r
	}},
	{"python-websockets", func(t *testing.T, url string, n int) deflateResult {
		var r deflateResult
		runJSON(t, interop.Python(t, interopCtx(t), "testdata/deflateclient.py", url, strconv.Itoa(n)), &r)
		return r
	}},
}

// TestDeflatePoliciesWithRealClients: Node ws, Chromium and python
// websockets each echo a 1 MiB compressible message through every policy,
// against a Node ws backend (Node ws on both splice drivers). pass and limit keep permessage-deflate on
// both sides (and limit counts the message inflated), strip leaves no
// extension on either side, and a window cap shows in both handshakes.
func TestDeflatePoliciesWithRealClients(t *testing.T) {
	const n = 1 << 20
	for _, cl := range deflateClients {
		t.Run(cl.name, func(t *testing.T) {
			paths := forEachPath
			if cl.name != "node-ws" {
				// Both drivers run the same session code: one client
				// through both is enough, the browser costs seconds a run.
				paths = func(t *testing.T, f func(t *testing.T, sp splicePath)) { f(t, spliceReadiness) }
			}
			paths(t, func(t *testing.T, sp splicePath) {
				for _, tc := range []struct {
					pol  DeflatePolicy
					bits int
				}{{DeflatePass, 0}, {DeflateLimit, 0}, {DeflateStrip, 0}, {DeflateLimit, 10}} {
					t.Run(string(tc.pol)+"/bits="+strconv.Itoa(tc.bits), func(t *testing.T) {
						b := startNodeBackend(t)
						e := deflateEdge(t, sp, b, tc.pol, tc.bits, 4<<20)
						r := cl.run(t, e.url("/"), n)
						if r.Echoed != 1 || r.Size != n || r.Code != 1000 {
							t.Fatalf("%s: echoed %d of size %d, close %d (%s %s), want one of %d and 1000", cl.name, r.Echoed, r.Size, r.Code, r.Reason, r.Error, n)
						}
						up := b.upgrade(t)
						e.obs.waitClosed(t)
						checkDeflateHandshakes(t, tc.pol, tc.bits, up, r.Answer)
						e.obs.mu.Lock()
						wire, inflated := e.obs.wire, e.obs.inflated
						e.obs.mu.Unlock()
						if tc.pol == DeflateLimit && (inflated != n || wire <= 0 || wire >= n) {
							t.Fatalf("limit counted %d wire bytes inflating to %d, want %d inflated from fewer", wire, inflated, n)
						}
					})
				}
			})
		})
	}
}

func checkDeflateHandshakes(t *testing.T, pol DeflatePolicy, bits int, up backendUpgrade, client string) {
	t.Helper()
	if pol == DeflateStrip {
		if up.Offer != "" || up.Answer != "" || client != "" {
			t.Fatalf("strip: backend saw offer %q answered %q, client saw %q; want no extension anywhere", up.Offer, up.Answer, client)
		}
		return
	}
	if !strings.Contains(up.Answer, "permessage-deflate") || !strings.Contains(client, "permessage-deflate") {
		t.Fatalf("%s: backend answered %q, client saw %q; want permessage-deflate on both", pol, up.Answer, client)
	}
	if bits == 0 {
		return
	}
	cap := "server_max_window_bits=" + strconv.Itoa(bits)
	if !strings.Contains(up.Offer, cap) || !strings.Contains(up.Answer, cap) {
		t.Fatalf("backend handshake: offer %q answer %q, want %s in both", up.Offer, up.Answer, cap)
	}
	if strings.Contains(up.Offer, "client_max_window_bits") && !strings.Contains(client, "client_max_window_bits="+strconv.Itoa(bits)) &&
		!strings.Contains(client, "client_max_window_bits="+strconv.Itoa(bits-1)) {
		t.Fatalf("client saw %q, want client_max_window_bits at most %d", client, bits)
	}
}

// TestDeflateBombClosed1009: Node ws sends one text message of 64 MiB of
// one byte, about 64 KiB compressed, through a 4 MiB message limit with
// deflate limit. The client gets 1009, and the Node ws backend (maxPayload
// 128 MiB: only edge can stop it) never receives a message over 4 MiB.
// Under strip the same message goes uncompressed, and the plain limit
// stops it.
func TestDeflateBombClosed1009(t *testing.T) {
	const bomb, limit = 64 << 20, 4 << 20
	forEachPath(t, func(t *testing.T, sp splicePath) {
		for _, pol := range []DeflatePolicy{DeflateLimit, DeflateStrip} {
			t.Run(string(pol), func(t *testing.T) {
				b := startNodeBackend(t)
				e := deflateEdge(t, sp, b, pol, 0, limit)
				var r deflateResult
				runJSON(t, interop.Node(t, interopCtx(t), "testdata/deflateclient.js", e.url("/"), "bomb", strconv.Itoa(bomb)), &r)
				if r.Code != CloseMessageTooBig {
					t.Fatalf("Node ws saw close %d (%q, error %q), want 1009", r.Code, r.Reason, r.Error)
				}
				want := "message_too_big_inflated"
				if pol == DeflateStrip {
					want = "message_too_big"
				}
				if got := e.obs.waitClosed(t); got != want {
					t.Fatalf("reason %q, want %q", got, want)
				}
				// The backend's close comes after every message it got.
				waitBackendClose(t, b)
				if largest, _ := b.stats(); largest > limit {
					t.Fatalf("backend received a message of %d bytes over the %d limit", largest, limit)
				}
			})
		}
	})
}

func waitBackendClose(t *testing.T, b *nodeBackend) {
	t.Helper()
	for {
		select {
		case ev := <-b.events:
			if ev.Event == "close" {
				return
			}
		case <-interopCtx(t).Done():
			t.Fatal("the backend's connection did not close")
		}
	}
}

package proxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
)

// frameSeen is the first frame a backend connection got, by path.
type frameSeen struct {
	path    string
	op      byte
	payload string
	err     error
}

// TestNodeWSPongs: Node ws answers every ping with a pong. On a
// connection whose backend never pings, edge's pings are answered and the
// backend's first frame is the client's message after three of them, no
// pong; on a second connection, whose backend pings, the backend gets
// the client's pong.
func TestNodeWSPongs(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		seen := make(chan frameSeen, 2)
		addr := testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			req, resp := testkit.ReadUpgrade(t, br)
			if req == nil {
				return
			}
			io.WriteString(c, resp)
			if req.URL.Path == "/pings" {
				c.Write(serverFrame(wswire.OpPing, true, nil))
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			f := frameSeen{path: req.URL.Path}
			f.op, f.payload, f.err = readFrame(br)
			seen <- f
			c.Write(serverFrame(wswire.OpText, true, []byte("ok")))
			for {
				// The client's close gets its answer (RFC 6455 §5.5.1).
				op, _, err := readFrame(br)
				if err != nil {
					return
				}
				if op == wswire.OpClose {
					c.Write(serverFrame(wswire.OpClose, true, []byte{0x03, 0xe8}))
					return
				}
			}
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		p.PingInterval = 20 * time.Millisecond
		p.PingTimeout = time.Minute
		p.MaxFrameBytes = 1 << 20
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		silent := startClient(interop.Node(t, interopCtx(t), "testdata/pongclient.js", e.url("/silent"), "3"))
		pinging := startClient(interop.Node(t, interopCtx(t), "testdata/pongclient.js", e.url("/pings"), "0"))
		for range 2 {
			var f frameSeen
			select {
			case f = <-seen:
			case <-time.After(time.Minute):
				// Bounds a broken run; the clients give up after 30 s.
				t.Fatal("the backends saw no frame")
			}
			want := frameSeen{path: f.path, op: wswire.OpText, payload: "after pings"}
			if f.path == "/pings" {
				want.op, want.payload = wswire.OpPong, ""
			}
			if f != want {
				t.Errorf("backend of %s: first frame %+v, want %+v", f.path, f, want)
			}
		}
		for name, res := range map[string]<-chan clientResult{"silent": silent, "pinging": pinging} {
			if r := <-res; r.Code != 1000 || r.Error != "" {
				t.Errorf("%s client: %+v", name, r)
			}
		}
	})
}

// readFrame reads one frame header and payload (unmasked) from br; a
// backend goroutine cannot fail the test itself.
func readFrame(br *bufio.Reader) (byte, string, error) {
	hdr := make([]byte, 0, wswire.MaxHeader)
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, "", err
		}
		hdr = append(hdr, b)
		h, err := wswire.ParseHeader(hdr)
		if err != nil {
			return 0, "", err
		}
		if h.Size == 0 {
			continue
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(br, p); err != nil {
			return 0, "", err
		}
		if h.Masked {
			for i := range p {
				p[i] ^= hdr[h.Size-4+i%4]
			}
		}
		return h.Opcode, string(p), nil
	}
}

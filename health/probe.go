package health

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/edgelb/edge/internal/wswire"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// maxProbeRead bounds what a WebSocket probe reads while waiting for its
// pong, so a backend streaming data cannot keep a probe busy.
const maxProbeRead = 1 << 20

// prober performs one probe of addr within ctx's deadline.
type prober interface {
	probe(ctx context.Context, addr string) error
}

// tcpProber passes when a TCP connection is established.
type tcpProber struct{}

func (tcpProber) probe(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// httpProber sends GET path and expects one status code. Each probe opens a
// fresh connection: a pooled keep-alive connection can hide a backend that no
// longer accepts new ones.
type httpProber struct {
	client *fasthttp.Client
	path   string
	host   string
	expect int
}

func newHTTPProber(path, host string, expect, maxHead int) *httpProber {
	return &httpProber{
		client: &fasthttp.Client{
			Name:                "edge-health",
			MaxResponseBodySize: 64 << 10,
			// fasthttp refuses a response head that does not fit its read
			// buffer, which is how it bounds one.
			ReadBufferSize:         maxHead,
			DisablePathNormalizing: true,
			// fasthttp passes what is left of the DoDeadline budget, so the
			// dial is bounded by the probe timeout too.
			DialTimeout: fasthttp.DialTimeout,
		},
		path:   path,
		host:   host,
		expect: expect,
	}
}

func (p *httpProber) probe(ctx context.Context, addr string) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		return errors.New("probe without deadline")
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + p.path)
	req.Header.SetMethod(fasthttp.MethodGet)
	if p.host != "" {
		req.SetHost(p.host)
	}
	req.SetConnectionClose()
	// SkipBody would be nicer, but a body must be drained to read a
	// well-formed response; MaxResponseBodySize bounds it.
	if err := p.client.DoDeadline(req, resp, deadline); err != nil {
		return err
	}
	if got := resp.StatusCode(); got != p.expect {
		return fmt.Errorf("status %d, want %d", got, p.expect)
	}
	return nil
}

// wsProber performs a real WebSocket opening handshake (RFC 6455 section 4)
// on a raw connection and, optionally, a ping/pong exchange (section 5.5.2).
// haproxy#1009 and tengine#1239 ask for exactly this: a port that accepts TCP
// or answers HTTP may still not speak WebSocket.
type wsProber struct {
	path    string
	host    string
	ping    bool
	maxHead int // bounds the response head; 0 means DefaultMaxHeaderBytes
}

func (p wsProber) probe(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	// Unblock reads if ctx ends before its deadline (shutdown).
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var raw [16]byte
	_, _ = rand.Read(raw[:])
	key := base64.StdEncoding.EncodeToString(raw[:])
	host := p.host
	if host == "" {
		host = addr
	}
	req := "GET " + p.path + " HTTP/1.1\r\n" +
		"Host: " + host + "\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\n" +
		"Sec-WebSocket-Version: 13\r\n" +
		"User-Agent: edge-health\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return fmt.Errorf("write handshake: %w", err)
	}
	maxHead := p.maxHead
	if maxHead <= 0 {
		maxHead = DefaultMaxHeaderBytes
	}
	// http.ReadResponse grows a header line without bound: the limit keeps
	// a backend sending an endless one from taking memory at line rate.
	lim := &headLimit{r: c, n: int64(maxHead)}
	br := bufio.NewReader(lim)
	// http.ReadResponse, not one fixed-size read: the answer may arrive in
	// pieces, and bytes after it (an early frame) stay in br.
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if lim.hit {
		return fmt.Errorf("read handshake: response head over %d bytes", maxHead)
	}
	if err != nil {
		return fmt.Errorf("read handshake: %w", err)
	}
	lim.n = math.MaxInt64 // frames follow; pingPong bounds them
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = resp.Body.Close()
		return fmt.Errorf("handshake status %d, want 101", resp.StatusCode)
	}
	// RFC 6455 section 4.1, client requirements 2-4 for the server's answer.
	if !httpguts.HeaderValuesContainsToken(resp.Header["Upgrade"], "websocket") {
		return fmt.Errorf("handshake: Upgrade %q, want websocket", resp.Header.Get("Upgrade"))
	}
	if !httpguts.HeaderValuesContainsToken(resp.Header["Connection"], "upgrade") {
		return fmt.Errorf("handshake: Connection %q, want upgrade", resp.Header.Get("Connection"))
	}
	if got, want := resp.Header.Get("Sec-WebSocket-Accept"), wswire.AcceptKey(key); got != want {
		return fmt.Errorf("handshake: Sec-WebSocket-Accept %q, want %q", got, want)
	}
	if p.ping {
		if err := pingPong(c, br); err != nil {
			return err
		}
	}
	// Say goodbye properly (close 1000); the answer is not awaited.
	_, _ = c.Write(clientFrame(opClose, []byte{0x03, 0xe8}))
	return nil
}

// headLimit reads at most n bytes from r, then fails and sets hit.
type headLimit struct {
	r   io.Reader
	n   int64
	hit bool
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.hit = true
		return 0, errors.New("response head over the limit")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// Opcodes are wswire's (RFC 6455 section 5.2).
const (
	opClose = wswire.OpClose
	opPing  = wswire.OpPing
	opPong  = wswire.OpPong
)

// clientFrame builds a final, masked frame: clients must mask every frame
// (RFC 6455 section 5.3). Payloads here are control-frame sized (< 126).
func clientFrame(op byte, payload []byte) []byte {
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	return wswire.AppendFrame(make([]byte, 0, 6+len(payload)), op, payload, &mask)
}

// pingPong sends a ping with random data and reads frames until the pong
// that echoes it. Data frames are skipped (a backend may greet first); an
// unsolicited pong with other data is allowed (section 5.5.3) and skipped.
func pingPong(w io.Writer, r *bufio.Reader) error {
	var data [8]byte
	_, _ = rand.Read(data[:])
	if _, err := w.Write(clientFrame(opPing, data[:])); err != nil {
		return fmt.Errorf("write ping: %w", err)
	}
	budget := int64(maxProbeRead)
	for {
		op, payload, n, err := readFrame(r, budget)
		if err != nil {
			return fmt.Errorf("await pong: %w", err)
		}
		budget -= n
		switch op {
		case opPong:
			if bytes.Equal(payload, data[:]) {
				return nil
			}
		case opClose:
			return errors.New("await pong: backend sent close")
		}
	}
}

// readFrame reads one frame from a server. It returns the opcode, the
// payload of control frames (data payloads are discarded), and the bytes
// consumed. Server frames must not be masked (section 5.1).
func readFrame(r *bufio.Reader, budget int64) (op byte, payload []byte, n int64, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, 0, err
	}
	op = h[0] & 0x0f
	if h[1]&0x80 != 0 {
		return 0, nil, 0, errors.New("masked frame from server")
	}
	n = 2
	length := int64(h[1] & 0x7f)
	switch length {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, 0, err
		}
		length, n = int64(binary.BigEndian.Uint16(b[:])), n+2
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, 0, err
		}
		u := binary.BigEndian.Uint64(b[:])
		if u > 1<<62 {
			return 0, nil, 0, errors.New("frame length out of range")
		}
		length, n = int64(u), n+8
	}
	if n+length > budget {
		return 0, nil, 0, fmt.Errorf("more than %d bytes without a pong", maxProbeRead)
	}
	n += length
	if op >= 0x8 { // control frame: at most 125 bytes, keep it
		if length > 125 {
			return 0, nil, 0, errors.New("control frame longer than 125 bytes")
		}
		payload = make([]byte, length)
		_, err = io.ReadFull(r, payload)
		return op, payload, n, err
	}
	_, err = r.Discard(int(length))
	return op, nil, n, err
}

// statusText is used in logs: "ok" or the error text.
func statusText(err error) string {
	if err == nil {
		return "ok"
	}
	return strings.TrimSpace(err.Error())
}

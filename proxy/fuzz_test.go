package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// FuzzUpgradeRequest: validation never panics, and whatever it accepts
// really is a GET with the upgrade tokens and a 16-byte key.
func FuzzUpgradeRequest(f *testing.F) {
	// A canonical RFC 6455 handshake.
	f.Add("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testKey + "\r\n\r\n")
	// Tokens in another case and order, split over lines.
	f.Add("GET /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: UPGRADE\r\nUpgrade: h2c, WebSocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testKey + "\r\n\r\n")
	// Two keys, a wrong version, a POST.
	f.Add("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: a\r\nSec-WebSocket-Key: b\r\n\r\n")
	f.Add("POST / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 8\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		intent := wantsUpgrade(r.Header)
		e := checkUpgrade(r)
		if e != nil {
			if e.status < 400 || e.status > 499 {
				t.Fatalf("status %d is not a client error", e.status)
			}
			return
		}
		if !intent && r.Header.Get("Upgrade") != "" && strings.Contains(strings.ToLower(r.Header.Get("Upgrade")), "websocket") {
			t.Fatalf("valid upgrade without intent: %q", raw)
		}
		if r.Method != http.MethodGet || !validKey(r.Header.Get("Sec-WebSocket-Key")) || r.Header.Get("Sec-WebSocket-Version") != "13" {
			t.Fatalf("accepted invalid handshake %q", raw)
		}
	})
}

// FuzzForwarded: client identity and forwarded headers never panic; the
// decided client is the peer unless the peer is trusted, and an untrusted
// peer's X-Forwarded-For is exactly the peer.
func FuzzForwarded(f *testing.F) {
	// Untrusted peer with a spoofed chain (gorouter#179).
	f.Add("203.0.113.9:1", "1.2.3.4, 5.6.7.8", "for=1.2.3.4")
	// Trusted peer, IPv6 hops with ports and brackets.
	f.Add("10.0.0.1:1", "[2001:db8::1]:80, 10.0.0.2", `for="[2001:db8::1]"`)
	// Garbage and empty hops.
	f.Add("10.0.0.1:1", ",,garbage,,", "")
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		id := decideClient(remote, []string{xff}, trusted)
		if !id.trusted && id.client != id.peer {
			t.Fatalf("untrusted peer %v: client %v", id.peer, id.client)
		}
		r, err := http.NewRequest(http.MethodGet, "http://example.com/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("Forwarded", fwd)
		lo := ListenerOptions{TrustedProxies: trusted, Forwarded: true}
		h := backendHeader(r, &lo, id)
		if !id.trusted {
			want := ""
			if id.peer.IsValid() {
				want = id.peer.String()
			}
			if got := h.Get("X-Forwarded-For"); got != want {
				t.Fatalf("untrusted X-Forwarded-For: got %q, want %q", got, want)
			}
		}
	})
}

// FuzzFrameHeader: the tracker finds the same frame boundaries however the
// stream is split, and never panics on arbitrary bytes.
func FuzzFrameHeader(f *testing.F) {
	// Text frame "hi" then a close.
	f.Add([]byte{0x81, 2, 'h', 'i', 0x88, 0}, uint8(1))
	// 16-bit length header split mid-way.
	f.Add(append([]byte{0x82, 126, 0, 3}, 'a', 'b', 'c'), uint8(3))
	// Masked client frame.
	f.Add([]byte{0x81, 0x81, 1, 2, 3, 4, 'x'}, uint8(2))
	// 64-bit length with the forbidden top bit.
	f.Add([]byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		if h, err := parseFrameHeader(data); err == nil && h.size != 0 && (h.size < 2 || h.size > maxFrameHeader || h.size > len(data)) {
			t.Fatalf("header size %d out of range for %d bytes", h.size, len(data))
		}
		boundaries := func(chunk int) []int {
			var tr frameTracker
			var got []int
			for pos := 0; pos < len(data); {
				p := data[pos:min(pos+chunk, len(data))]
				for len(p) > 0 {
					n := tr.feed(p, true)
					if n <= 0 || n > len(p) {
						t.Fatalf("feed returned %d for %d bytes", n, len(p))
					}
					pos += n
					p = p[n:]
					if tr.atBoundary() && (len(got) == 0 || got[len(got)-1] != pos) {
						got = append(got, pos)
					}
				}
			}
			return got
		}
		whole := boundaries(len(data) + 1)
		parts := boundaries(int(split%16) + 1)
		if len(whole) != len(parts) {
			t.Fatalf("boundaries: whole %v, split %v", whole, parts)
		}
		for i := range whole {
			if whole[i] != parts[i] {
				t.Fatalf("boundaries: whole %v, split %v", whole, parts)
			}
		}
	})
}

// pipeListener hands out one server end of a net.Pipe whose peer looks
// like a trusted TCP address.
type pipeListener struct{ c chan net.Conn }

type addrConn struct{ net.Conn }

func (addrConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (l *pipeListener) Accept() (net.Conn, error) {
	c, ok := <-l.c
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l *pipeListener) Close() error   { return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// FuzzProxyHeader feeds arbitrary bytes through the listener wrapper: it
// never panics and never blocks past its header timeout.
func FuzzProxyHeader(f *testing.F) {
	// v1 TCP4 header followed by a request line.
	f.Add([]byte("PROXY TCP4 192.0.2.1 192.0.2.2 1000 443\r\nGET / HTTP/1.1\r\n"))
	// v1 UNKNOWN and a truncated v1.
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add([]byte("PROXY TCP6 ::1"))
	// v2 signature with a LOCAL command and no addresses.
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"))
	// No header at all.
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pl := &pipeListener{c: make(chan net.Conn, 1)}
		server, client := net.Pipe()
		pl.c <- addrConn{server}
		close(pl.c)
		l := ListenProxyProtocol(pl, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, 50*time.Millisecond)
		go func() {
			client.SetWriteDeadline(time.Now().Add(time.Second))
			client.Write(data)
			client.Close()
		}()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(time.Second))
		_ = c.RemoteAddr()
		io.Copy(io.Discard, io.LimitReader(c, int64(len(data))+1))
	})
}

// FuzzFrameLimit: the frame-size limit trips at the same header however
// the stream is split, before any of that frame's payload is consumed.
func FuzzFrameLimit(f *testing.F) {
	// A frame at the limit, then one over it.
	f.Add([]byte{0x81, 3, 'a', 'b', 'c', 0x81, 4, 'a', 'b', 'c', 'd'}, uint8(2), uint16(3))
	// A masked 16-bit-length header over the limit, split mid-way.
	f.Add([]byte{0x82, 0x80 | 126, 1, 0, 1, 2, 3, 4}, uint8(1), uint16(255))
	// A 64-bit length with the forbidden top bit: broken, not too big.
	f.Add([]byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, uint8(3), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8, limit uint16) {
		if limit == 0 {
			return
		}
		// trip returns where the tracker stopped and whether it did.
		trip := func(chunk int) (int, bool, bool) {
			tr := frameTracker{limit: uint64(limit)}
			for pos := 0; pos < len(data); {
				p := data[pos:min(pos+chunk, len(data))]
				n := tr.feed(p, false)
				if n < 0 || n > len(p) {
					t.Fatalf("feed returned %d for %d bytes", n, len(p))
				}
				if tr.tooBig {
					return pos + n, tr.split, true
				}
				pos += len(p)
			}
			return len(data), false, false
		}
		at, _, big := trip(len(data) + 1)
		sat, split, sbig := trip(int(cut%16) + 1)
		if big != sbig {
			t.Fatalf("too big: whole %v, split %v", big, sbig)
		}
		if !big {
			return
		}
		// A header that began in an earlier chunk has bytes already past.
		if split && (sat < at || sat-at >= maxFrameHeader) || !split && sat != at {
			t.Fatalf("stopped at %d (split header %v), want %d", sat, split, at)
		}
	})
}

// FuzzMessageLimit: with a frame and a message limit, a random stream cut
// at random points (cuts gives the chunk lengths) trips at the same header,
// for the same cause, as the stream fed whole; and a stream that trips
// for its message holds a message whose data frames sum past the limit.
func FuzzMessageLimit(f *testing.F) {
	// Three fragments of 4 (text, continuation, continuation): 12 > 10.
	f.Add([]byte{0x01, 4, 'a', 'b', 'c', 'd', 0x00, 4, 'e', 'f', 'g', 'h', 0x80, 4, 'i', 'j', 'k', 'l'}, []byte{1, 5, 2}, uint16(0), uint16(10))
	// A ping between fragments does not count; a new message restarts.
	f.Add([]byte{0x01, 4, 'a', 'b', 'c', 'd', 0x89, 2, 'p', 'p', 0x80, 4, 'e', 'f', 'g', 'h', 0x81, 8, 1, 2, 3, 4, 5, 6, 7, 8}, []byte{3}, uint16(0), uint16(8))
	// Masked 16-bit fragments, the frame limit trips first.
	f.Add([]byte{0x02, 0x80 | 126, 0, 200, 1, 2, 3, 4}, []byte{1, 1, 1}, uint16(100), uint16(1000))
	f.Fuzz(func(t *testing.T, data, cuts []byte, limit, msgLimit uint16) {
		type decision struct {
			at          int
			big, forMsg bool
		}
		run := func(cuts []byte) decision {
			tr := frameTracker{limit: uint64(limit), msgLimit: uint64(msgLimit)}
			for pos, i := 0, 0; pos < len(data); i++ {
				k := len(data)
				if len(cuts) > 0 {
					k = int(cuts[i%len(cuts)]%32) + 1
				}
				p := data[pos:min(pos+k, len(data))]
				n := tr.feed(p, false)
				if n < 0 || n > len(p) {
					t.Fatalf("feed returned %d for %d bytes", n, len(p))
				}
				if tr.tooBig {
					at := pos + n
					if tr.split {
						// The header began in an earlier chunk: find its start.
						at = -1
					}
					return decision{at, true, tr.tooBigMsg}
				}
				if tr.broken {
					return decision{-2, false, false}
				}
				pos += len(p)
			}
			return decision{len(data), false, false}
		}
		whole, split := run(nil), run(cuts)
		if whole.big != split.big || whole.forMsg != split.forMsg {
			t.Fatalf("whole %+v, split %+v", whole, split)
		}
		if split.at >= 0 && whole.at != split.at {
			t.Fatalf("stopped at %d split, %d whole", split.at, whole.at)
		}
		if whole.forMsg && msgLimit == 0 || whole.big && !whole.forMsg && limit == 0 {
			t.Fatalf("tripped without the limit: %+v", whole)
		}
	})
}

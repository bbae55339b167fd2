package wsession

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/wswire"
)

// drive feeds the backend stream data to a new session in chunks of the
// sizes cuts gives (cycled; none: whole), asks for a ping once the
// stream is at byte ping and a close 1001 once it is at byte closeAt
// (both cut there), and returns what goes to the client and the output
// offsets of the control frames the session injected.
func drive(t *testing.T, cfg *Config, data, cuts []byte, ping, closeAt int) (out []byte, inj []int, end bool) {
	var s Session
	s.Init(cfg, 1)
	carry := func(c Control) bool {
		if c.Frame != nil {
			inj = append(inj, len(out))
			out = append(out, c.Frame...)
			s.ControlWritten(c, 2)
		}
		return c.End
	}
	for pos, i := 0, 0; pos < len(data); i++ {
		if pos == ping && s.fw != nil {
			s.fw.pingWanted.Store(true)
		}
		if pos == closeAt {
			s.Request(CloseGoingAway, Reason("drain"))
		}
		if carry(s.BackendControl()) {
			return out, inj, true
		}
		k := len(data) - pos
		if len(cuts) > 0 {
			k = min(int(cuts[i%len(cuts)]%32)+1, len(data)-pos)
		}
		for _, cut := range []int{ping, closeAt} {
			if pos < cut && pos+k > cut {
				k = cut - pos
			}
		}
		p := data[pos : pos+k]
		pos += k
		for len(p) > 0 {
			n, v := s.FromBackend(p)
			if n < 0 || n > len(p) {
				t.Fatalf("FromBackend consumed %d of %d", n, len(p))
			}
			if v == Drop {
				break
			}
			out = append(out, p[:n]...)
			if v == TooBig {
				return out, inj, true
			}
			p = p[n:]
			if carry(s.BackendControl()) {
				return out, inj, true
			}
		}
	}
	return out, inj, end
}

// FuzzSessionSplit: the same backend stream split at random points gives
// the same bytes to the client, with the same control frames at the same
// places, and no control frame ever lands inside a frame: every injected
// frame starts at a frame boundary of the output.
func FuzzSessionSplit(f *testing.F) {
	var s splitCheck
	// Two text frames; a ping wanted inside the first, a close inside the second.
	f.Add([]byte{0x81, 3, 'a', 'b', 'c', 0x81, 2, 'd', 'e'}, []byte{1, 2}, uint8(2), uint8(6), uint16(0))
	// A 16-bit frame, the close requested mid-header.
	f.Add(append([]byte{0x82, 126, 0, 4}, 'w', 'x', 'y', 'z', 0x81, 0), []byte{3}, uint8(200), uint8(1), uint16(0))
	// A frame over the limit after one under it.
	f.Add([]byte{0x81, 1, 'a', 0x81, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []byte{1}, uint8(0), uint8(200), uint16(4))
	// The backend's own close passing through when the close is requested.
	f.Add([]byte{0x88, 2, 0x03, 0xe8, 0x81, 1, 'x'}, []byte{1}, uint8(200), uint8(1), uint16(0))
	f.Fuzz(func(t *testing.T, data, cuts []byte, ping, closeAt uint8, limit uint16) {
		cfg := &Config{PingInterval: time.Second, MaxFrameBytes: int64(limit), LingerBytes: 1}
		whole, wi, we := drive(t, cfg, data, nil, int(ping), int(closeAt))
		split, si, se := drive(t, cfg, data, cuts, int(ping), int(closeAt))
		if we && se && len(split) > len(whole) && s.tooBigHeader(whole, split) {
			// A header over the limit split across chunks: its first bytes
			// went before it could be judged (as FuzzFrameLimit allows).
			split = split[:len(whole)]
		}
		var whole0 tracker
		whole0.feed(data, false)
		// Lost framing (a 64-bit length with its top bit) ends the
		// connection after the chunk it was lost in: how much of it went
		// depends on the chunks, and no control frame goes after it.
		if !whole0.broken && (!bytes.Equal(whole, split) || !slices.Equal(wi, si) || we != se) {
			t.Fatalf("whole % x (control at %v, end %v)\nsplit % x (control at %v, end %v)", whole, wi, we, split, si, se)
		}
		// Boundaries of the output as a fresh tracker sees them.
		var tr tracker
		bounds := map[int]bool{0: true}
		for pos, p := 0, split; len(p) > 0; {
			n := tr.feed(p, true)
			if n == 0 || tr.broken {
				break
			}
			pos += n
			p = p[n:]
			if tr.atBoundary() {
				bounds[pos] = true
			}
		}
		for _, at := range si {
			if !bounds[at] {
				t.Fatalf("control frame at %d is inside a frame of % x", at, split)
			}
		}
	})
}

// FuzzSessionClient: client bytes split at random points are judged the
// same as the stream fed whole: as many bytes forwarded, the masked close
// to the backend and the close request to the client alike.
func FuzzSessionClient(f *testing.F) {
	f.Add([]byte{0x01, 4, 'a', 'b', 'c', 'd', 0x80, 4, 'e', 'f', 'g', 'h'}, []byte{1, 5}, uint16(0), uint16(6))
	f.Add([]byte{0x82, 0x80 | 126, 0, 200, 1, 2, 3, 4}, []byte{1, 1, 1}, uint16(100), uint16(0))
	// A message, two empty pongs (one answers edge's ping), a pong with data.
	f.Add([]byte{0x81, 0x81, 1, 2, 3, 4, 'a', 0x8a, 0x80, 1, 2, 3, 4, 0x8a, 0x80, 5, 6, 7, 8, 0x8a, 0x81, 1, 2, 3, 4, 'b'}, []byte{7, 3, 9}, uint16(10), uint16(0))
	f.Fuzz(func(t *testing.T, data, cuts []byte, limit, msgLimit uint16) {
		cfg := &Config{MaxFrameBytes: int64(limit), MaxMessageBytes: int64(msgLimit)}
		run := func(cuts []byte) (fwd int, closeBackend, wake bool, code int) {
			var s Session
			s.Init(cfg, 1)
			for pos, i := 0, 0; pos < len(data); i++ {
				k := len(data) - pos
				if len(cuts) > 0 {
					k = int(cuts[i%len(cuts)]%32) + 1
				}
				p := data[pos:min(pos+k, len(data))]
				pos += len(p)
				v := s.FromClient(p, 2)
				if v.N < 0 || v.N > len(p) || v.N < len(p) && pos < len(data) && !s.fw.tooBig {
					t.Fatalf("FromClient: %+v for %d bytes", v, len(p))
				}
				fwd += v.N
				closeBackend = closeBackend || v.CloseBackend
				wake = wake || v.Wake
			}
			return fwd, closeBackend, wake, int(s.closeCode.Load())
		}
		if !cfg.FrameAware() {
			return
		}
		f1, c1, w1, k1 := run(nil)
		f2, c2, w2, k2 := run(cuts)
		// A header split across chunks is judged at its last byte: its
		// first bytes already went, and no masked close can follow. A
		// stream whose framing broke drops the chunk it broke in, so
		// chunks forwarded before that may hold more.
		if w1 != w2 || k1 != k2 || f2 < f1 || c1 && f2-f1 >= wswire.MaxHeader || (c1 != c2 && f2 == f1) {
			t.Fatalf("whole: %d %v %v %d; split: %d %v %v %d", f1, c1, w1, k1, f2, c2, w2, k2)
		}
		pcfg := *cfg
		pcfg.PingInterval = time.Second
		for _, backendPing := range []bool{false, true} {
			checkPongs(t, &pcfg, data, nil, backendPing)
			checkPongs(t, &pcfg, data, cuts, backendPing)
			pcfg := pcfg
			pcfg.MaxFrameBytes, pcfg.MaxMessageBytes = 0, 0 // pings only
			checkPongs(t, &pcfg, data, cuts, backendPing)
		}
	})
}

// checkPongs feeds the client stream data in chunks (as FuzzSessionClient)
// after edge pinged, and after a backend ping when backendPing: what edge
// consumed is one whole empty masked pong at a frame boundary of data
// (none while the backend's ping waits for the first pong), and what went
// on is data without it.
func checkPongs(t *testing.T, cfg *Config, data, cuts []byte, backendPing bool) {
	t.Helper()
	var s Session
	s.Init(cfg, 1)
	if backendPing {
		s.FromBackend([]byte{0x89, 0})
	}
	s.fw.pingWanted.Store(true)
	c := s.BackendControl()
	s.ControlWritten(c, 1)
	var fwd []byte
	var drops []int
	consumed := 0
	for pos, i := 0, 0; pos < len(data); i++ {
		k := len(data) - pos
		if len(cuts) > 0 {
			k = int(cuts[i%len(cuts)]%32) + 1
		}
		p := data[pos:min(pos+k, len(data))]
		pos += len(p)
		for at := pos - len(p); len(p) > 0; {
			v := s.FromClient(p, 2)
			if v.N < 0 || v.Drop < 0 || v.N+v.Drop > len(p) {
				t.Fatalf("FromClient: %+v for %d bytes", v, len(p))
			}
			fwd = append(fwd, p[:v.N]...)
			if v.Drop == 0 {
				consumed = at + v.N
				if v.N < len(p) {
					pos = len(data) // the rest is not forwarded: the end
				}
				break
			}
			drops = append(drops, at+v.N)
			at += v.N + v.Drop
			consumed = at
			p = p[v.N+v.Drop:]
		}
	}
	if len(drops) > 1 {
		t.Fatalf("one ping out, %d pongs consumed at %v", len(drops), drops)
	}
	var want []byte
	last := 0
	for _, d := range drops {
		var fresh tracker
		fresh.feed(data[:d], false)
		if !fresh.atBoundary() || !isEmptyPong(data[d:]) {
			t.Fatalf("consumed at %d: % x, not an empty masked pong at a boundary", d, data[d:min(d+6, len(data))])
		}
		if backendPing && !pongBefore(data[:d]) {
			t.Fatalf("consumed the pong at %d while the backend's ping waited", d)
		}
		want = append(want, data[last:d]...)
		last = d + len(emptyPong)
	}
	want = append(want, data[last:consumed]...)
	if !bytes.Equal(fwd, want) {
		t.Fatalf("forwarded % x, want % x (consumed %v)", fwd, want, drops)
	}
}

// pongBefore reports whether a pong frame header starts at a frame
// boundary of the client stream p.
func pongBefore(p []byte) bool {
	var tr tracker
	for len(p) > 0 {
		if tr.atBoundary() {
			if h, err := wswire.ParseHeader(p); err == nil && h.Size != 0 && h.Opcode == wswire.OpPong {
				return true
			}
		}
		n := tr.feed(p, true)
		if n == 0 || tr.broken {
			return false
		}
		p = p[n:]
	}
	return false
}

type splitCheck struct{}

// tooBigHeader reports that split is whole plus the first bytes of one
// frame header.
func (splitCheck) tooBigHeader(whole, split []byte) bool {
	return bytes.HasPrefix(split, whole) && len(split)-len(whole) < wswire.MaxHeader
}

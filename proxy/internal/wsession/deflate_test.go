package wsession

import (
	"bytes"
	"compress/flate"
	"testing"

	"github.com/edgelb/edge/internal/wswire"
)

// compressedFrames are the client frames of msg compressed (RSV1 on the
// first, RFC 7692 §6), split into frames of at most frag payload bytes.
func compressedFrames(t testing.TB, msg []byte, frag int) ([]byte, int) {
	t.Helper()
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	c := deflateMessage(t, w, &buf, msg)
	var out []byte
	k := [4]byte{1, 2, 3, 4}
	for i := 0; i == 0 || i < len(c); i += frag {
		end := min(len(c), i+frag)
		op := byte(wswire.OpText)
		if i > 0 {
			op = wswire.OpContinuation
		}
		f := wswire.AppendFrame(nil, op, c[i:end], &k)
		f[0] = op
		if end == len(c) {
			f[0] |= 0x80 // FIN
		}
		if i == 0 {
			f[0] |= 0x40 // RSV1: compressed
		}
		out = append(out, f...)
	}
	return out, len(c)
}

func limitConfig(limit int64) *Config {
	return &Config{MaxMessageBytes: limit, Inflate: new(Inflaters)}
}

func TestFromClientCountsCompressedMessagesInflated(t *testing.T) {
	const limit = 1 << 20
	small := bytes.Repeat([]byte("abc"), limit/3)
	bomb := bytes.Repeat([]byte{'a'}, 16<<20)
	for _, tc := range []struct {
		name    string
		msg     []byte
		deflate bool // negotiated
		over    bool
		frag    int
	}{
		{"within", small, true, false, 1 << 30},
		{"within fragmented", small, true, false, 100},
		{"bomb", bomb, true, true, 1 << 30},
		{"bomb fragmented", bomb, true, true, 7},
		{"bomb without deflate negotiated: RSV1 refused", bomb, false, false, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Session
			s.Init(limitConfig(limit), 1)
			if tc.deflate {
				s.DeflateOn()
			}
			wire, _ := compressedFrames(t, tc.msg, tc.frag)
			sent := 0
			for off := 0; off < len(wire); off += 1000 {
				p := wire[off:min(len(wire), off+1000)]
				c := s.FromClient(p, 2)
				sent += c.N
				if c.N < len(p) {
					break
				}
			}
			if !tc.deflate {
				// RSV1 without the extension is a protocol error (RFC
				// 6455 §5.2): refused at its header, nothing of it sent.
				if sent != 0 || s.Reason() != ReasonProtocolError || s.closeCode.Load() != CloseProtocolError {
					t.Fatalf("RSV1 without deflate: %d bytes went on, reason %q, close %d", sent, s.Reason(), s.closeCode.Load())
				}
				return
			}
			if got := s.Reason() == ReasonMessageTooBigInflated; got != tc.over {
				t.Fatalf("reason %q after %d of %d bytes, want over=%v", s.Reason(), sent, len(wire), tc.over)
			}
			if !tc.over {
				if sent != len(wire) {
					t.Fatalf("forwarded %d of %d bytes", sent, len(wire))
				}
				if s.MidMessage() {
					t.Fatal("a whole message left an inflater held")
				}
				return
			}
			if s.closeCode.Load() != CloseMessageTooBig {
				t.Fatalf("close code %d, want 1009", s.closeCode.Load())
			}
		})
	}
}

// A connection between two messages holds no inflater; one mid-message
// does and says so (it cannot move).
func TestInflaterOnlyWhileAMessageIsInFlight(t *testing.T) {
	var s Session
	s.Init(limitConfig(1<<20), 1)
	s.DeflateOn()
	wire, _ := compressedFrames(t, bytes.Repeat([]byte("hello "), 1000), 1<<30)
	s.FromClient(wire[:len(wire)/2], 2)
	if !s.MidMessage() || s.fw.z.z == nil {
		t.Fatal("half a compressed message: no inflater held")
	}
	s.FromClient(wire[len(wire)/2:], 3)
	if s.MidMessage() || s.fw.z.z != nil {
		t.Fatal("the message ended, the inflater is still held")
	}
	w, z := s.Inflated()
	if z != 6000 || w == 0 {
		t.Fatalf("Inflated() = %d wire, %d inflated; want 6000 inflated", w, z)
	}
}

func TestFromClientRefusesWhatIsNotDeflate(t *testing.T) {
	var s Session
	s.Init(limitConfig(1<<20), 1)
	s.DeflateOn()
	k := [4]byte{}
	f := wswire.AppendFrame(nil, wswire.OpBinary, []byte{0x07, 1, 2, 3}, &k)
	f[0] |= 0x40
	if c := s.FromClient(f, 2); c.N == len(f) {
		t.Fatal("a reserved block type went to the backend whole")
	}
	if s.Reason() != ReasonDeflateError || s.closeCode.Load() != CloseInvalidData {
		t.Fatalf("reason %q code %d, want deflate_error 1007", s.Reason(), s.closeCode.Load())
	}
}

// BenchmarkBomb is what the 64 MiB bomb costs edge under deflate limit
// with a 4 MiB message limit: the client frames (about 64 KiB, fed in
// 16 KiB reads) counted until the limit, then the close.
//
//	go test -run '^$' -bench Bomb -benchmem ./proxy/internal/wsession
func BenchmarkBomb(b *testing.B) {
	wire, _ := compressedFrames(b, bytes.Repeat([]byte{'a'}, 64<<20), 1<<30)
	cfg := limitConfig(4 << 20)
	b.SetBytes(int64(len(wire)))
	b.ReportAllocs()
	for b.Loop() {
		var s Session
		s.Init(cfg, 1)
		s.DeflateOn()
		for off := 0; off < len(wire); off += 16 << 10 {
			if c := s.FromClient(wire[off:min(len(wire), off+16<<10)], 2); c.Wake {
				break
			}
		}
		if s.Reason() != ReasonMessageTooBigInflated {
			b.Fatalf("reason %q", s.Reason())
		}
	}
}

// BenchmarkCount1KiB is counting one compressible 1 KiB message (the
// echo benchmark's), its inflater from the pool.
func BenchmarkCount1KiB(b *testing.B) {
	msg := bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 40)[:1024]
	wire, _ := compressedFrames(b, msg, 1<<30)
	cfg := limitConfig(4 << 20)
	var s Session
	s.Init(cfg, 1)
	s.DeflateOn()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if c := s.FromClient(wire, 2); c.N != len(wire) {
			b.Fatal("refused")
		}
	}
}

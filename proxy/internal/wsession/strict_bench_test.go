package wsession

import (
	"testing"

	"github.com/edgelb/edge/internal/wswire"
)

// BenchmarkSessionFrames is what the session costs per frame on the hot
// path: 200 masked 100-byte text frames a read from the client, and the
// echo's 200 unmasked frames from the backend, in a frame-aware pool.
func BenchmarkSessionFrames(b *testing.B) {
	k := [4]byte{1, 2, 3, 4}
	var client, backend []byte
	for range 200 {
		client = wswire.AppendFrame(client, wswire.OpText, make([]byte, 100), &k)
		backend = wswire.AppendFrame(backend, wswire.OpText, make([]byte, 100), nil)
	}
	cfg := &Config{MaxFrameBytes: 1 << 20, MaxMessageBytes: 4 << 20, PingInterval: 30e9, PingTimeout: 10e9}
	var s Session
	s.Init(cfg, 1)
	b.Run("client", func(b *testing.B) {
		b.SetBytes(int64(len(client)))
		for b.Loop() {
			if c := s.FromClient(client, 2); c.N != len(client) {
				b.Fatal(c)
			}
		}
	})
	b.Run("backend", func(b *testing.B) {
		b.SetBytes(int64(len(backend)))
		for b.Loop() {
			if n, _ := s.FromBackend(backend); n != len(backend) {
				b.Fatal(n)
			}
		}
	})
}

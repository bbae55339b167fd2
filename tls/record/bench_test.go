package record

import (
	"fmt"
	"testing"
)

// BenchmarkRebuildAEADs is what Idle costs later: rebuilding both AEADs
// (key schedules, GHASH tables) from the kept keys.
func BenchmarkRebuildAEADs(b *testing.B) {
	for _, suite := range suites {
		b.Run(fmt.Sprintf("%#04x", suite), func(b *testing.B) {
			s, _ := statePair(b, suite)
			b.ReportAllocs()
			for b.Loop() {
				s.Idle()
				s.read.build(suite)
				s.write.build(suite)
			}
		})
	}
}

// BenchmarkOpenSeal is one record each way per iteration: Open
// unprotects a client record in place, Seal protects the plaintext back,
// for a 100-byte and a 16 KiB record. The same client record is opened
// every time (copied in, read sequence number reset), so the loop holds
// only Open, Seal and one copy.
func BenchmarkOpenSeal(b *testing.B) {
	for _, suite := range suites {
		for _, n := range []int{100, maxPlaintext} {
			b.Run(fmt.Sprintf("%#04x/%d", suite, n), func(b *testing.B) { benchOpenSeal(b, suite, n, false) })
		}
	}
}

// BenchmarkOpenSealAfterIdle is the same with Idle before every iteration:
// a connection that goes idle between messages pays the rebuild.
func BenchmarkOpenSealAfterIdle(b *testing.B) {
	for _, suite := range suites {
		for _, n := range []int{100, maxPlaintext} {
			b.Run(fmt.Sprintf("%#04x/%d", suite, n), func(b *testing.B) { benchOpenSeal(b, suite, n, true) })
		}
	}
}

func benchOpenSeal(b *testing.B, suite uint16, n int, idle bool) {
	s, cv := statePair(b, suite)
	rec := cv.Seal(nil, message(n, 3))
	in := make([]byte, len(rec))
	out := make([]byte, 0, MaxRecord)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if idle {
			s.Idle()
		}
		copy(in, rec)
		s.read.seq = 0
		plain, _, err := s.Open(in)
		if err != nil || len(plain) != n {
			b.Fatal(err)
		}
		out = s.Seal(out[:0], plain)
	}
}

// BenchmarkResume is the takeover of one connection: the state crypto/tls
// reached, rebuilt from the logs of a real handshake with its session
// tickets and one exchange each way.
func BenchmarkResume(b *testing.B) {
	for _, suite := range suites {
		b.Run(fmt.Sprintf("%#04x", suite), func(b *testing.B) {
			p := newSuitePair(b, true, suite)
			exchangeTB(b, p, "GET / HTTP/1.1", "HTTP/1.1 101 Switching Protocols")
			rd, wr := p.sw.logs()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Resume(p.suite, p.cs, p.ss, rd, wr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

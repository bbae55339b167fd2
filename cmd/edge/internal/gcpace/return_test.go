package gcpace

import (
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"
)

// heldConn stands for the live heap of one held connection (about 1.5
// KiB in a few objects).
type heldConn struct {
	next *heldConn
	m    map[int]*[64]byte
	buf  []byte
}

var gcSink []byte

// TestMain runs the sender of BenchmarkReturnMemory when asked to: a
// process of its own, so that the collector measured does not pace it.
func TestMain(m *testing.M) {
	if os.Getenv("GCPACE_SENDER") == "1" {
		var b [8]byte
		for {
			binary.LittleEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
			if _, err := os.Stdout.Write(b[:]); err != nil {
				os.Exit(0)
			}
			time.Sleep(time.Millisecond)
		}
	}
	os.Exit(m.Run())
}

// BenchmarkReturnMemory measures what ReturnMemory costs the goroutines
// beside it, the question of whether the proxy may call it while traffic
// flows (proxy/internal/ready/trim_linux.go): 12,000 held connections'
// worth of live heap and 16 MiB of a burst's garbage, another process
// sending a timestamp every millisecond through a pipe, read by a
// goroutine woken by Go's netpoller as edge's pollers are, and the delay
// of the timestamps that arrived while ReturnMemory ran. Run it with
// -cpu 1, as edge runs on a small box:
//
//	go test -run '^$' -bench ReturnMemory -cpu 1 -benchtime 40x ./internal/gcpace
//
// On the 2-core benchmark host (shared; three runs): 5.5–6.1 ms per call,
// the messages read meanwhile delayed 1.2–3.8 ms at p99 and 2.1–4.9 ms at
// worst, against 0.06–0.11 ms at p99 in calm windows (one run's 13.6 was
// the host's).
func BenchmarkReturnMemory(b *testing.B) {
	var held *heldConn
	for range 12000 {
		held = &heldConn{next: held, m: map[int]*[64]byte{1: new([64]byte), 2: new([64]byte)}, buf: make([]byte, 1160)}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "GCPACE_SENDER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	type mark struct {
		at    time.Time
		delay time.Duration
	}
	var marks []mark
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [8]byte
		for {
			if _, err := io.ReadFull(out, buf[:]); err != nil {
				return
			}
			now := time.Now()
			marks = append(marks, mark{now, now.Sub(time.Unix(0, int64(binary.LittleEndian.Uint64(buf[:]))))})
		}
	}()
	var from, to, calmFrom, calmTo []time.Time
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for range 16 << 20 / 256 {
			gcSink = make([]byte, 256)
		}
		// A window as long as a call, nothing but waiting: the pipe's
		// and the host's own delays.
		time.Sleep(50 * time.Millisecond)
		calmFrom = append(calmFrom, time.Now())
		time.Sleep(10 * time.Millisecond)
		calmTo = append(calmTo, time.Now())
		time.Sleep(50 * time.Millisecond)
		b.StartTimer()
		from = append(from, time.Now())
		ReturnMemory()
		to = append(to, time.Now())
	}
	b.StopTimer()
	cmd.Process.Kill()
	<-done
	runtime.KeepAlive(held)
	// The timestamps read from the start of a call until a millisecond
	// after it, those it held up, against those read in the calm
	// windows.
	within := func(from, to []time.Time) []time.Duration {
		var d []time.Duration
		for _, m := range marks {
			for i := range from {
				if !m.at.Before(from[i]) && !m.at.After(to[i].Add(time.Millisecond)) {
					d = append(d, m.delay)
				}
			}
		}
		return d
	}
	in, outside := within(from, to), within(calmFrom, calmTo)
	if len(in) == 0 || len(outside) == 0 {
		return
	}
	slices.Sort(in)
	slices.Sort(outside)
	b.ReportMetric(float64(in[len(in)*99/100])/1e6, "p99-delay-ms")
	b.ReportMetric(float64(in[len(in)-1])/1e6, "max-delay-ms")
	b.ReportMetric(float64(outside[len(outside)*99/100])/1e6, "p99-delay-calm-ms")
	b.ReportMetric(float64(outside[len(outside)-1])/1e6, "max-delay-calm-ms")
	b.ReportMetric(float64(len(in))/float64(b.N), "msgs/op")
}

//go:build linux

package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/gorilla/websocket"
)

// The benchmarks put the clients and the backend in a second process (this
// test binary, re-run as TestLoadHelper), so the benchmark process holds
// only the proxy: its RSS and CPU time are the proxy's. Like bench/, they
// pin the proxy to one P (GOMAXPROCS=1) and use TLS 1.3 with X25519.
//
//	go test -run '^$' -bench IdleMemory -benchtime 1x ./proxy
//	EDGE_IDLE_CONNS=9800 go test -run '^$' -bench IdleMemory -benchtime 1x ./proxy
//	EDGE_BENCH_TLS12=1 go test -run '^$' -bench IdleMemory -benchtime 1x ./proxy   (TLS 1.2: crypto/tls's records)
//	EDGE_IDLE_BIG=16384 go test -run '^$' -bench IdleMemory -benchtime 1x ./proxy   (one 16 KiB echo each, then idle)
//	EDGE_BENCH_PINGS=1 go test -run '^$' -bench IdleMemory -benchtime 1x ./proxy   (frame-aware, pings every 30s, timeout 90s)
//	EDGE_IDLE_HEAPPROFILE=/tmp/idle go test -run '^$' -bench IdleMemory -benchtime 1x ./proxy   (every allocation sampled; the profile after the settle delay and a collection)
//	go test -run '^$' -bench EchoCPU -benchtime 1x ./proxy

// helperEnv switches the test binary into the load helper.
const helperEnv = "EDGE_LOAD_HELPER"

// loadHelper is the second process: a backend and the clients.
type loadHelper struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	addr string // backend
}

// startHelper starts the helper in mode ("idle N" or "echo CONNS SECONDS")
// and reads its backend address.
func startHelper(b *testing.B, mode string) *loadHelper {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	h := runHelper(b, cmd, "helper")
	h.addr = strings.TrimPrefix(h.expect(b, "backend "), "backend ")
	return h
}

// runHelper starts cmd, a helper process talking over its standard input
// and output, and stops it (its input closed) when b ends.
func runHelper(b *testing.B, cmd *exec.Cmd, name string) *loadHelper {
	b.Helper()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", name, err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	return &loadHelper{cmd: cmd, in: in, out: bufio.NewReader(out)}
}

// expect reads the helper's next line, which must start with prefix.
func (h *loadHelper) expect(b *testing.B, prefix string) string {
	b.Helper()
	for {
		line, err := h.out.ReadString('\n')
		if err != nil {
			b.Fatalf("helper: %v (waiting for %q)", err, prefix)
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
}

// benchEdge starts a TLS edge on path p in front of the helper's backend.
func benchEdge(b *testing.B, p splicePath, h *loadHelper) *edge {
	b.Helper()
	pool := newPool(b, "bench", balance.LeastConn, map[string]string{"b1": h.addr})
	pool.IdleTimeout, pool.WriteTimeout = time.Hour, 30*time.Second
	if os.Getenv("EDGE_BENCH_PINGS") != "" {
		pool.PingInterval, pool.PingTimeout = 30*time.Second, 90*time.Second
	}
	obs := &reasonCounter{reasons: map[string]int{}}
	b.Cleanup(func() {
		if n := obs.total(); n > 0 {
			b.Logf("closed during the benchmark: %v", obs.reasons)
		}
	})
	return startEdge(b, edgeConfig{tls: true, splice: p, opts: Options{Routes: []Route{{Default: true, Pool: pool}}, Observer: obs}})
}

// reasonCounter counts close reasons without ever blocking the data path.
type reasonCounter struct {
	NopObserver
	mu      sync.Mutex
	reasons map[string]int
}

func (r *reasonCounter) ConnClosed(_, _, reason string, _ time.Duration, _, _ int64) {
	r.mu.Lock()
	r.reasons[reason]++
	r.mu.Unlock()
}

func (r *reasonCounter) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.reasons {
		n += v
	}
	return n
}

// rssKiB reads this process's resident set size.
func rssKiB(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	b.Skip("no VmRSS")
	return 0
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkIdleMemory reports the proxy's RSS per idle wss connection after
// one small echo each, on both splice paths.
func BenchmarkIdleMemory(b *testing.B) {
	n := envInt("EDGE_IDLE_CONNS", 2000)
	for _, p := range splicePaths {
		b.Run(p.String(), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			profile := os.Getenv("EDGE_IDLE_HEAPPROFILE")
			if profile != "" {
				// Every allocation sampled: per-connection bytes, not
				// 512 KiB samples.
				defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
				runtime.MemProfileRate = 1
			}
			h := startHelper(b, fmt.Sprintf("idle %d %d", n, envInt("EDGE_IDLE_BIG", 0)))
			e := benchEdge(b, p, h)
			runtime.GC()
			debug.FreeOSMemory()
			before := rssKiB(b)
			g0 := runtime.NumGoroutine()
			fmt.Fprintf(h.in, "edge %s\n", e.addr)
			h.expect(b, "ready")
			if n := e.srv.readyConns(); n != 0 && p == spliceGoroutines || n == 0 && p == spliceReadiness {
				b.Fatalf("path %s: %d readiness-driven connections", p, n)
			}
			if got := e.srv.Active(); got != n {
				b.Fatalf("Active: got %d, want %d", got, n)
			}
			after := rssKiB(b)
			goroutines := runtime.NumGoroutine() - g0
			// Like bench/'s settle delay: memory returned lazily counts.
			time.Sleep(time.Duration(envInt("EDGE_IDLE_SETTLE_SECONDS", 5)) * time.Second)
			settled := rssKiB(b)
			runtime.GC()
			debug.FreeOSMemory()
			afterGC := rssKiB(b)
			if profile != "" {
				runtime.GC() // the profile shows the last collection's live heap
				if w, err := os.Create(profile + "." + p.String()); err == nil {
					pprof.Lookup("heap").WriteTo(w, 0)
					w.Close()
				}
			}
			// What the heap itself holds after the collection: live
			// objects, and the spans they keep in use (fragmentation).
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/float64(n), "live-B/conn")
			b.ReportMetric(float64(ms.HeapInuse)/float64(n), "inuse-B/conn")
			b.ReportMetric((after-before)/float64(n), "KiB/conn")
			b.ReportMetric((settled-before)/float64(n), "KiB/conn-settled")
			b.ReportMetric((afterGC-before)/float64(n), "KiB/conn-after-GC")
			b.ReportMetric(float64(goroutines)/float64(n), "goroutines/conn")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkEchoCPU reports the proxy's CPU time per echoed 100-byte
// message (client to backend and back counts once), closed loop over 50
// wss connections, on both splice paths.
func BenchmarkEchoCPU(b *testing.B) {
	const conns, seconds = 50, 5
	for _, p := range splicePaths {
		b.Run(p.String(), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			h := startHelper(b, fmt.Sprintf("echo %d %d", conns, seconds))
			e := benchEdge(b, p, h)
			fmt.Fprintf(h.in, "edge %s\n", e.addr)
			h.expect(b, "start")
			c0 := cpuTime()
			line := h.expect(b, "done ")
			cpu := cpuTime() - c0
			msgs, err := strconv.Atoi(strings.TrimPrefix(line, "done "))
			if err != nil || msgs == 0 {
				b.Fatalf("helper: %q", line)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(msgs), "cpu-µs/msg")
			b.ReportMetric(float64(msgs)/seconds, "msgs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// TestLoadHelper is the benchmarks' second process; it only runs when
// started by them.
func TestLoadHelper(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("run by BenchmarkIdleMemory and BenchmarkEchoCPU")
	}
	be, err := testbackend.Start("b1")
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	fmt.Printf("backend %s\n", be.Addr())
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url := "wss://" + strings.TrimSpace(strings.TrimPrefix(line, "edge ")) + "/"
	d := &websocket.Dialer{
		TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, // the benchmark's own self-signed certificate
			MinVersion:         tls.VersionTLS13,
			CurvePreferences:   []tls.CurveID{tls.X25519},
		},
		HandshakeTimeout: 30 * time.Second,
	}
	if os.Getenv("EDGE_BENCH_TLS12") == "1" {
		// TLS 1.2 stays with crypto/tls's records: the figure to
		// compare edge's own TLS 1.3 record layer with.
		d.TLSClientConfig.MinVersion, d.TLSClientConfig.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	}
	f := strings.Fields(mode)
	switch f[0] {
	case "idle":
		n, _ := strconv.Atoi(f[1])
		big := 0
		if len(f) > 2 {
			big, _ = strconv.Atoi(f[2])
		}
		cs := make([]*websocket.Conn, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		msg := []byte("0123456789abcdef")
		for i := range cs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c, _, err := d.Dial(url, nil)
				if err != nil {
					t.Errorf("dial %d: %v", i, err)
					return
				}
				cs[i] = c
				c.WriteMessage(websocket.BinaryMessage, msg)
				if _, _, err := c.ReadMessage(); err != nil {
					t.Errorf("echo %d: %v", i, err)
				}
				if big > 0 {
					// One large message each, as chat and game traffic
					// has now and then: what stays held afterwards?
					c.WriteMessage(websocket.BinaryMessage, make([]byte, big))
					if _, _, err := c.ReadMessage(); err != nil {
						t.Errorf("large echo %d: %v", i, err)
					}
				}
			}()
		}
		wg.Wait()
		fmt.Println("ready")
		io.Copy(io.Discard, in)
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	case "echo":
		conns, _ := strconv.Atoi(f[1])
		secs, _ := strconv.Atoi(f[2])
		cs := make([]*websocket.Conn, conns)
		msg := make([]byte, 100)
		for i := range cs {
			c, _, err := d.Dial(url, nil)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close()
			c.WriteMessage(websocket.BinaryMessage, msg)
			c.ReadMessage()
			cs[i] = c
		}
		var count atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		fmt.Println("start")
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
						return
					}
					if _, _, err := c.ReadMessage(); err != nil {
						return
					}
					count.Add(1)
				}
			}()
		}
		time.Sleep(time.Duration(secs) * time.Second) // the measured window
		stop.Store(true)
		wg.Wait()
		fmt.Printf("done %d\n", count.Load())
		io.Copy(io.Discard, in)
	case "connect":
		workers, _ := strconv.Atoi(f[1])
		secs, _ := strconv.Atoi(f[2])
		connectLoop(t, d, url, workers, time.Duration(secs)*time.Second)
		io.Copy(io.Discard, in)
	}
}

// connectLoop runs workers loops of: dial (a full TLS 1.3 handshake:
// the dialer keeps no session cache), upgrade, one small echo, close,
// for the window, and prints how many completed.
func connectLoop(t *testing.T, d *websocket.Dialer, url string, workers int, window time.Duration) {
	var count atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	msg := []byte("0123456789abcdef")
	fmt.Println("start")
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				c, _, err := d.Dial(url, nil)
				if err != nil {
					t.Errorf("dial: %v", err)
					return
				}
				c.WriteMessage(websocket.BinaryMessage, msg)
				_, _, err = c.ReadMessage()
				c.Close()
				if err != nil {
					t.Errorf("echo: %v", err)
					return
				}
				count.Add(1)
			}
		}()
	}
	time.Sleep(window) // the measured window
	stop.Store(true)
	wg.Wait()
	fmt.Printf("done %d\n", count.Load())
}

// BenchmarkConnectCPU reports the proxy's CPU time per connection set up:
// a full TLS 1.3 handshake, the upgrade with its backend dial, one small
// echo and the close, 8 loops at once, on the readiness splice.
//
//	go test -run '^$' -bench ConnectCPU -benchtime 1x -cpuprofile cpu.out ./proxy
func BenchmarkConnectCPU(b *testing.B) {
	const workers, seconds = 8, 5
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	h := startHelper(b, fmt.Sprintf("connect %d %d", workers, seconds))
	e := benchEdge(b, spliceReadiness, h)
	fmt.Fprintf(h.in, "edge %s\n", e.addr)
	h.expect(b, "start")
	c0 := cpuTime()
	line := h.expect(b, "done ")
	cpu := cpuTime() - c0
	n, err := strconv.Atoi(strings.TrimPrefix(line, "done "))
	if err != nil || n == 0 {
		b.Fatalf("helper: %q", line)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/conn")
	b.ReportMetric(float64(n)/seconds, "conns/s")
	b.ReportMetric(0, "ns/op")
}

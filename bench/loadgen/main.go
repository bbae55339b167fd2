// Command loadgen is the benchmark's WebSocket-over-TLS load generator.
//
// It opens wss connections to one address, spreading their source addresses
// over 127.0.0.2 and up (bind before connect with IP_BIND_ADDRESS_NO_PORT, so
// the kernel picks the port per 4-tuple and ephemeral ports never run out),
// and runs one of four workloads:
//
//	idle     hold -conns connections after one small echo each (and, with
//	         -big N, one N-byte echo each, -big-concurrency at a time); on
//	         the command "echo" send one more on every held connection
//	echo     closed loop: every connection sends -size bytes and awaits the echo
//	rate     open loop: every connection sends -rate messages per second;
//	         latency is measured from the scheduled send time, so a stalled
//	         proxy cannot hide its queueing (no coordinated omission)
//	connect  -workers loops of dial, TLS 1.3 handshake (full, or resumed with
//	         -resume), WebSocket upgrade, one echo, close
//	hold     -conns connections that each reconnect when they end (after a
//	         random delay up to -reconnect-jitter), answer pings, and of
//	         which -active echo -size bytes -rate times a second (hold.go)
//
// -client picks the WebSocket implementation, gorilla/websocket or
// gobwas/ws (client.go says how each writes a message, and so which TLS
// records the proxy reads).
//
// It is driven by bench/cmd/benchrun over standard input and output (package
// bench/internal/wire) and stops by itself after -max-life.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgelb/edge/bench/internal/stats"
	"github.com/edgelb/edge/bench/internal/wire"
)

type config struct {
	mode      string
	client    string
	target    string
	host      string
	path      string
	conns     int
	size      int
	big       int
	bigConc   int
	rate      float64
	workers   int
	resume    bool
	curve     string
	bare      bool
	dialConc  int
	srcBase   netip.Addr
	srcOffset int
	srcCount  int
	maxLife   time.Duration
	timeout   time.Duration
	active    int
	jitter    time.Duration
}

func main() {
	var c config
	var src string
	flag.StringVar(&c.mode, "mode", "echo", "workload: idle, echo, rate, connect or hold")
	flag.StringVar(&c.client, "client", clientGorilla, "WebSocket client: "+clientGorilla+", "+clientGorillaDeflate+" or "+clientGobwas+" (see client.go for how each writes messages)")
	flag.StringVar(&c.target, "target", "127.0.0.1:18443", "address of the proxy under test")
	flag.StringVar(&c.host, "host", "localhost", "TLS server name and Host header")
	flag.StringVar(&c.path, "path", "/echo", "request path of the upgrade")
	flag.IntVar(&c.conns, "conns", 100, "connections (idle, echo, rate)")
	flag.IntVar(&c.size, "size", 100, "message size in bytes (echo, rate)")
	flag.IntVar(&c.big, "big", 0, "idle: after the small echo, echo one message of this many bytes on every connection before holding it (0: none)")
	flag.IntVar(&c.bigConc, "big-concurrency", 16, "idle: connections echoing the -big message at once")
	flag.Float64Var(&c.rate, "rate", 2, "messages per second per connection (rate)")
	flag.IntVar(&c.workers, "workers", 32, "concurrent connect loops (connect)")
	flag.BoolVar(&c.resume, "resume", false, "resume TLS sessions with tickets (connect)")
	flag.BoolVar(&c.bare, "bare", false, "connect: dial, TLS handshake and close, no upgrade nor echo (full handshakes only)")
	flag.StringVar(&c.curve, "curve", "X25519", "the one key exchange offered: X25519 (what OpenSSL 3.0 can do) or X25519MLKEM768 (what Chromium and Firefox prefer)")
	flag.IntVar(&c.dialConc, "dial-concurrency", 64, "connections being established at once")
	flag.StringVar(&src, "src-base", "127.0.0.2", "first source address")
	flag.IntVar(&c.srcOffset, "src-offset", 0, "offset of this process's first source address from -src-base")
	flag.IntVar(&c.srcCount, "src-count", 64, "number of source addresses this process uses")
	flag.IntVar(&c.active, "active", 0, "hold: connections that echo -size bytes -rate times a second; the others only answer pings")
	flag.DurationVar(&c.jitter, "reconnect-jitter", 10*time.Second, "hold: a connection that ends reconnects after a random delay up to this")
	flag.DurationVar(&c.maxLife, "max-life", 10*time.Minute, "exit after this long whatever happens")
	flag.DurationVar(&c.timeout, "timeout", 15*time.Second, "timeout of one dial, handshake, upgrade or echo")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var err error
	if c.srcBase, err = netip.ParseAddr(src); err != nil || !c.srcBase.Is4() || !c.srcBase.IsLoopback() {
		fatal(log, fmt.Errorf("parse -src-base %q: want an IPv4 loopback address", src))
	}
	if last := wire.SourceAddr(c.srcBase, c.srcOffset+c.srcCount-1); !last.IsLoopback() {
		fatal(log, fmt.Errorf("source range -src-base %s -src-offset %d -src-count %d leaves 127.0.0.0/8", src, c.srcOffset, c.srcCount))
	}
	if c.srcCount < 1 || c.conns < 1 || c.workers < 1 || c.dialConc < 1 || c.size < 1 || c.bigConc < 1 || c.big < 0 {
		fatal(log, errors.New("-src-count, -conns, -workers, -dial-concurrency, -size and -big-concurrency must be positive, -big not negative"))
	}
	if c.curve != "X25519" && c.curve != "X25519MLKEM768" {
		fatal(log, fmt.Errorf("unknown -curve %q (want X25519 or X25519MLKEM768)", c.curve))
	}
	if c.client != clientGorilla && c.client != clientGorillaDeflate && c.client != clientGobwas {
		fatal(log, fmt.Errorf("unknown -client %q (want %s, %s or %s)", c.client, clientGorilla, clientGorillaDeflate, clientGobwas))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.maxLife)
	defer cancel()

	g := newGen(c)
	cmds := readCommands(ctx, os.Stdin, cancel)
	if err := g.run(ctx, cmds); err != nil {
		fatal(log, err)
	}
}

func fatal(log *slog.Logger, err error) {
	log.Error("loadgen failed", "err", err)
	_ = json.NewEncoder(os.Stdout).Encode(wire.Event{Event: wire.EventFatal, Error: err.Error()})
	os.Exit(1)
}

// readCommands forwards command lines from r; the end of input (the
// orchestrator went away) cancels the run.
func readCommands(ctx context.Context, r io.Reader, cancel context.CancelFunc) <-chan string {
	ch := make(chan string)
	go func() {
		defer cancel()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// await blocks until the command want arrives; ctx ending is an error.
func await(ctx context.Context, cmds <-chan string, want string) error {
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("await %q: %w", want, context.Cause(ctx))
		case got := <-cmds:
			if got == want {
				return nil
			}
		}
	}
}

// gen is one generator process.
type gen struct {
	c       config
	out     *json.Encoder
	outMu   sync.Mutex
	errs    atomic.Uint64
	errOnce sync.Once
	errText atomic.Pointer[string]
	payload []byte
	// big is the -big message, shared read-only by every connection.
	big []byte
	// writers lends gobwas connections their write buffers.
	writers *sync.Pool
}

func newGen(c config) *gen {
	fill := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = 'a' + byte(i%26)
		}
		return p
	}
	return &gen{c: c, out: json.NewEncoder(os.Stdout), payload: fill(c.size), big: fill(c.big), writers: newWriterPool()}
}

func (g *gen) emit(e wire.Event) {
	e.Errors = g.errs.Load()
	if s := g.errText.Load(); s != nil {
		e.ErrorSample = *s
	}
	g.outMu.Lock()
	defer g.outMu.Unlock()
	_ = g.out.Encode(e)
}

func (g *gen) fail(err error) {
	g.errs.Add(1)
	g.errOnce.Do(func() {
		s := err.Error()
		g.errText.Store(&s)
	})
}

func (g *gen) tlsConfig(cache tls.ClientSessionCache) *tls.Config {
	return &tls.Config{
		ServerName: g.c.host,
		// The generator shares a core with the backends; verifying the
		// self-signed certificate would only spend that core. The proxy's
		// cost is the same either way.
		InsecureSkipVerify: true, //nolint:gosec // benchmark client against a local self-signed certificate.
		MinVersion:         tls.VersionTLS13,
		MaxVersion:         tls.VersionTLS13,
		// X25519 only by default: OpenSSL 3.0 (HAProxy, nginx) has no
		// ML-KEM, while Go would negotiate the much larger hybrid
		// X25519MLKEM768 with a Go server, so every proxy does the same key
		// exchange. -curve X25519MLKEM768 measures the hybrid on its own.
		CurvePreferences:   []tls.CurveID{g.curveID()},
		NextProtos:         []string{"http/1.1"},
		ClientSessionCache: cache,
	}
}

// curveID is the -curve key exchange's identifier.
func (g *gen) curveID() tls.CurveID {
	if g.c.curve == "X25519MLKEM768" {
		return tls.X25519MLKEM768
	}
	return tls.X25519
}

// conn is one established connection.
type conn struct {
	ws  wsConn
	tls *tls.Conn
}

// dial connects from src, completes the TLS handshake and the upgrade with
// the client -client names.
func (g *gen) dial(ctx context.Context, src netip.Addr, cfg *tls.Config) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, g.c.timeout)
	defer cancel()
	nd := wire.SourceDialer(src, 0)
	raw, err := nd.DialContext(ctx, "tcp4", g.c.target)
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", g.c.target, src, err)
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", g.c.target, err)
	}
	ws, err := upgrade(ctx, g.c.client, tc, g.c.host, g.c.path, g.writers)
	if err != nil {
		_ = tc.Close()
		return nil, fmt.Errorf("upgrade via %s (%s): %w", g.c.target, g.c.client, err)
	}
	return &conn{ws: ws, tls: tc}, nil
}

// echo sends msg and reads one message back through buf, checking its
// length: buf may be shorter than msg.
func (c *conn) echo(msg, buf []byte, timeout time.Duration) error {
	dl := time.Now().Add(timeout)
	if err := c.ws.writeMessage(msg, dl); err != nil {
		return fmt.Errorf("write echo: %w", err)
	}
	n, err := c.ws.readMessage(buf, dl)
	if err != nil {
		return fmt.Errorf("read echo: %w", err)
	}
	if n != len(msg) {
		return fmt.Errorf("echo returned %d bytes, want %d", n, len(msg))
	}
	return nil
}

func (c *conn) close() { _ = c.ws.close() }

func (g *gen) src(i int) netip.Addr {
	return wire.SourceAddr(g.c.srcBase, g.c.srcOffset+i%g.c.srcCount)
}

// connectAll establishes n connections, each with one echo of msg, with
// bounded concurrency. Failed ones are counted and left out.
func (g *gen) connectAll(ctx context.Context, n int, msg []byte) []*conn {
	cfg := g.tlsConfig(nil)
	conns := make([]*conn, n)
	sem := make(chan struct{}, g.c.dialConc)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := g.dial(ctx, g.src(i), cfg)
			if err != nil {
				g.fail(err)
				return
			}
			if err := c.echo(msg, make([]byte, len(msg)), g.c.timeout); err != nil {
				g.fail(err)
				c.close()
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	out := conns[:0]
	for _, c := range conns {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

func closeAll(conns []*conn) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for _, c := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.close()
		})
	}
	wg.Wait()
}

func describe(c *conn) (cipher, curve string) {
	if c == nil || c.tls == nil {
		return "", ""
	}
	st := c.tls.ConnectionState()
	return tls.CipherSuiteName(st.CipherSuite), st.CurveID.String()
}

func (g *gen) run(ctx context.Context, cmds <-chan string) error {
	switch g.c.mode {
	case "idle":
		return g.runIdle(ctx, cmds)
	case "echo":
		return g.runLoop(ctx, cmds, false)
	case "rate":
		return g.runLoop(ctx, cmds, true)
	case "connect":
		return g.runConnect(ctx, cmds)
	case "hold":
		return g.runHold(ctx, cmds)
	default:
		return fmt.Errorf("unknown -mode %q", g.c.mode)
	}
}

// runIdle holds connections after one small echo each: the memory phase.
func (g *gen) runIdle(ctx context.Context, cmds <-chan string) error {
	conns := g.connectAll(ctx, g.c.conns, g.payload[:min(16, len(g.payload))])
	if len(g.big) > 0 {
		conns = g.bigAll(ctx, conns)
	}
	defer closeAll(conns)
	var cipher, curve string
	if len(conns) > 0 {
		cipher, curve = describe(conns[0])
	}
	g.emit(wire.Event{Event: wire.EventReady, Conns: len(conns), Cipher: cipher, Curve: curve})
	if err := g.holdUntil(ctx, cmds, conns, wire.CmdStart); err != nil {
		return err
	}
	t0 := time.Now()
	if err := g.holdUntil(ctx, cmds, conns, wire.CmdStop); err != nil {
		return err
	}
	g.emit(wire.Event{Event: wire.EventResult, Conns: len(conns), Window: time.Since(t0)})
	// Hold until the orchestrator has measured and closes our input (which
	// ends ctx), still answering echo requests.
	_ = g.holdUntil(ctx, cmds, conns, "")
	return nil
}

// holdUntil waits for the command want, answering CmdEcho meanwhile with one
// echo on every held connection. With want "" it waits for ctx to end.
func (g *gen) holdUntil(ctx context.Context, cmds <-chan string, conns []*conn, want string) error {
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("await %q: %w", want, context.Cause(ctx))
		case got := <-cmds:
			switch {
			case want != "" && got == want:
				return nil
			case got == wire.CmdEcho:
				n := g.echoAll(conns)
				g.emit(wire.Event{Event: wire.EventEchoed, Conns: len(conns), Messages: uint64(n)})
			}
		}
	}
}

// echoAll sends one small echo on every connection, -dial-concurrency at a
// time, and returns how many came back. A failed one is counted as an error.
func (g *gen) echoAll(conns []*conn) int {
	msg := g.payload[:min(16, len(g.payload))]
	var ok atomic.Int64
	sem := make(chan struct{}, g.c.dialConc)
	var wg sync.WaitGroup
	for _, c := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.echo(msg, make([]byte, len(msg)), g.c.timeout); err != nil {
				g.fail(err)
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	return int(ok.Load())
}

// bigScratch is what one large echo is read through: the message streams
// past, so a generator holding thousands of connections never keeps one.
const bigScratch = 32 << 10

// bigAll echoes the -big message once on every connection, -big-concurrency
// at a time, and returns those that got it back; the others are counted as
// errors and closed. Memory stays bounded by the concurrency: the payload is
// shared and every worker reads through its own scratch buffer.
func (g *gen) bigAll(ctx context.Context, conns []*conn) []*conn {
	ok := make([]bool, len(conns))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(g.c.bigConc, len(conns)) {
		wg.Go(func() {
			buf := make([]byte, bigScratch)
			for i := range next {
				if err := conns[i].echo(g.big, buf, g.c.timeout); err != nil {
					g.fail(fmt.Errorf("echo of %d bytes: %w", len(g.big), err))
					conns[i].close()
					continue
				}
				ok[i] = true
			}
		})
	}
	for i := range conns {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	out := conns[:0]
	for i, c := range conns {
		if ok[i] {
			out = append(out, c)
		} else if ctx.Err() != nil {
			c.close()
		}
	}
	return out
}

// runLoop runs the closed-loop echo (paced false) or the fixed-rate echo
// (paced true) on established connections.
func (g *gen) runLoop(ctx context.Context, cmds <-chan string, paced bool) error {
	conns := g.connectAll(ctx, g.c.conns, g.payload)
	defer closeAll(conns)
	var cipher, curve string
	if len(conns) > 0 {
		cipher, curve = describe(conns[0])
	}
	g.emit(wire.Event{Event: wire.EventReady, Conns: len(conns), Cipher: cipher, Curve: curve})
	if err := await(ctx, cmds, wire.CmdStart); err != nil {
		return err
	}

	var (
		stopped  atomic.Bool
		messages atomic.Uint64
		histMu   sync.Mutex
		hist     stats.Histogram
	)
	period := time.Duration(float64(time.Second) / g.c.rate)
	t0 := time.Now()
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			buf := make([]byte, len(g.payload))
			next := t0.Add(time.Duration(rand.Int64N(int64(period))))
			for !stopped.Load() && runCtx.Err() == nil {
				if paced {
					if d := time.Until(next); d > 0 {
						select {
						case <-time.After(d):
						case <-runCtx.Done():
							return
						}
					}
				}
				if err := c.echo(g.payload, buf, g.c.timeout); err != nil {
					if !stopped.Load() {
						g.fail(err)
					}
					return
				}
				if stopped.Load() {
					return
				}
				messages.Add(1)
				if paced {
					lat := time.Since(next)
					histMu.Lock()
					hist.Record(lat)
					histMu.Unlock()
					next = next.Add(period)
				}
			}
		})
	}
	if err := await(ctx, cmds, wire.CmdStop); err != nil {
		return err
	}
	stopped.Store(true)
	window := time.Since(t0)
	n := messages.Load()
	histMu.Lock()
	snap := hist.Clone()
	histMu.Unlock()
	e := wire.Event{Event: wire.EventResult, Conns: len(conns), Messages: n, Window: window}
	if paced {
		e.Latency = snap
	}
	g.emit(e)
	// In-flight echoes finish within one round trip; a wedged one is cut by
	// its deadline or by closing the connections.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(g.c.timeout):
		cancelRun()
	case <-ctx.Done():
	}
	return nil
}

// bareCycle is one -bare connection: dial, a full TLS handshake, close;
// done is called once the handshake succeeded.
func (g *gen) bareCycle(ctx context.Context, src netip.Addr, cfg *tls.Config, done func()) error {
	ctx, cancel := context.WithTimeout(ctx, g.c.timeout)
	defer cancel()
	raw, err := wire.SourceDialer(src, 0).DialContext(ctx, "tcp4", g.c.target)
	if err != nil {
		return fmt.Errorf("dial %s from %s: %w", g.c.target, src, err)
	}
	defer raw.Close()
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tls handshake with %s: %w", g.c.target, err)
	}
	done()
	return nil
}

// runConnect measures connection establishment: each worker loops over dial,
// handshake, upgrade, one echo and close. With -resume every worker keeps its
// own one-entry ticket cache, primed by a warm-up connection before the window.
func (g *gen) runConnect(ctx context.Context, cmds <-chan string) error {
	type worker struct {
		cfg *tls.Config
		id  int
	}
	workers := make([]worker, g.c.workers)
	for i := range workers {
		var cache tls.ClientSessionCache
		if g.c.resume {
			cache = tls.NewLRUClientSessionCache(1)
		}
		workers[i] = worker{cfg: g.tlsConfig(cache), id: i}
	}
	msg := g.payload[:min(16, len(g.payload))]

	var (
		counting atomic.Bool
		stopped  atomic.Bool
		ops      atomic.Uint64
		resumed  atomic.Uint64
		histMu   sync.Mutex
		hist     stats.Histogram
		cipherMu sync.Mutex
		cipher   string
		curve    string
	)
	cycle := func(w worker, i int) error {
		start := time.Now()
		if g.c.bare {
			return g.bareCycle(ctx, g.src(w.id+i*g.c.workers), w.cfg, func() {
				if counting.Load() && !stopped.Load() {
					ops.Add(1)
					histMu.Lock()
					hist.Record(time.Since(start))
					histMu.Unlock()
				}
			})
		}
		c, err := g.dial(ctx, g.src(w.id+i*g.c.workers), w.cfg)
		if err != nil {
			return err
		}
		defer c.close()
		// The echo also makes the client read the NewSessionTicket that a
		// TLS 1.3 server sends after the handshake (RFC 8446 section 4.6.1).
		if err := c.echo(msg, make([]byte, len(msg)), g.c.timeout); err != nil {
			return err
		}
		if counting.Load() && !stopped.Load() {
			ops.Add(1)
			if c.tls.ConnectionState().DidResume {
				resumed.Add(1)
			}
			histMu.Lock()
			hist.Record(time.Since(start))
			histMu.Unlock()
		}
		cipherMu.Lock()
		if cipher == "" {
			cipher, curve = describe(c)
		}
		cipherMu.Unlock()
		return nil
	}

	// Warm-up: one cycle per worker, which primes the ticket caches.
	var warm sync.WaitGroup
	sem := make(chan struct{}, g.c.dialConc)
	for _, w := range workers {
		sem <- struct{}{}
		warm.Go(func() {
			defer func() { <-sem }()
			if err := cycle(w, 0); err != nil {
				g.fail(err)
			}
		})
	}
	warm.Wait()
	g.emit(wire.Event{Event: wire.EventReady, Conns: len(workers), Cipher: cipher, Curve: curve})
	if err := await(ctx, cmds, wire.CmdStart); err != nil {
		return err
	}
	t0 := time.Now()
	counting.Store(true)
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			for i := 1; !stopped.Load() && ctx.Err() == nil; i++ {
				if err := cycle(w, i); err != nil && !stopped.Load() {
					g.fail(err)
					// Back off briefly so a refusing proxy is not hammered.
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	if err := await(ctx, cmds, wire.CmdStop); err != nil {
		return err
	}
	stopped.Store(true)
	window := time.Since(t0)
	histMu.Lock()
	snap := hist.Clone()
	histMu.Unlock()
	g.emit(wire.Event{Event: wire.EventResult, Conns: len(workers), Ops: ops.Load(), Resumed: resumed.Load(),
		Latency: snap, Window: window, Cipher: cipher, Curve: curve})
	wg.Wait()
	return nil
}

package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
)

// Probe types.
const (
	TypeTCP       = "tcp"
	TypeHTTP      = "http"
	TypeWebSocket = "websocket"
)

// Defaults for Options.
const (
	DefaultInterval    = 5 * time.Second
	DefaultTimeout     = 2 * time.Second
	DefaultRise        = 2
	DefaultFall        = 3
	DefaultConcurrency = 32
	// DefaultMaxHeaderBytes bounds a backend's response head to an http or
	// websocket probe.
	DefaultMaxHeaderBytes = 64 << 10
)

// Source is what a Checker probes: *balance.Pool.
type Source interface {
	Snapshot() *balance.Snapshot
}

var _ Source = (*balance.Pool)(nil)

// Observer receives probe results, typically to feed metrics. It is called
// from the Checker's goroutine and must not block.
type Observer interface {
	ProbeResult(pool, backend string, ok bool, dur time.Duration)
}

type nopObserver struct{}

func (nopObserver) ProbeResult(string, string, bool, time.Duration) {}

var _ Observer = nopObserver{}

// Options configure a Checker.
type Options struct {
	Pool   string // pool name, for logs and the Observer
	Source Source // required

	Type     string        // TypeTCP, TypeHTTP or TypeWebSocket; required
	Interval time.Duration // between probes of one backend; default 5s
	Timeout  time.Duration // per probe; default 2s, at most Interval
	Rise     int           // consecutive passes that make a backend healthy; default 2
	Fall     int           // consecutive failures that make it unhealthy; default 3

	Path         string // http and websocket: request path; default "/"
	Host         string // http and websocket: Host header; default the backend address
	ExpectStatus int    // http: expected status; default 200
	Ping         bool   // websocket: after the handshake, expect a pong to a ping

	// Concurrency bounds the probes in flight; default 32.
	Concurrency int
	// MaxHeaderBytes bounds the backend's response head (http and
	// websocket); a longer one fails the probe. Default 64 KiB.
	MaxHeaderBytes int

	Logger   *slog.Logger
	Observer Observer
}

// Checker actively probes every backend of one pool and flips
// Backend.SetHealthy with rise/fall thresholds.
type Checker struct {
	opts   Options
	prober prober
	tick   time.Duration
}

// New validates opts and fills defaults.
func New(opts Options) (*Checker, error) {
	if opts.Source == nil {
		return nil, fmt.Errorf("health: pool %q: source is required", opts.Pool)
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Timeout > opts.Interval {
		return nil, fmt.Errorf("health: pool %q: timeout %v exceeds interval %v", opts.Pool, opts.Timeout, opts.Interval)
	}
	if opts.Rise <= 0 {
		opts.Rise = DefaultRise
	}
	if opts.Fall <= 0 {
		opts.Fall = DefaultFall
	}
	if opts.Path == "" {
		opts.Path = "/"
	}
	if !strings.HasPrefix(opts.Path, "/") || strings.ContainsAny(opts.Path, " \r\n") {
		return nil, fmt.Errorf("health: pool %q: path %q must start with / and hold no spaces", opts.Pool, opts.Path)
	}
	if strings.ContainsAny(opts.Host, " \r\n") {
		return nil, fmt.Errorf("health: pool %q: host %q holds spaces", opts.Pool, opts.Host)
	}
	if opts.ExpectStatus == 0 {
		opts.ExpectStatus = 200
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Logger = opts.Logger.With("pool", opts.Pool)
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	c := &Checker{opts: opts, tick: min(100*time.Millisecond, opts.Interval/2)}
	switch opts.Type {
	case TypeTCP:
		c.prober = tcpProber{}
	case TypeHTTP:
		c.prober = newHTTPProber(opts.Path, opts.Host, opts.ExpectStatus, opts.MaxHeaderBytes)
	case TypeWebSocket:
		c.prober = wsProber{path: opts.Path, host: opts.Host, ping: opts.Ping, maxHead: opts.MaxHeaderBytes}
	default:
		return nil, fmt.Errorf("health: pool %q: type %q: want tcp, http or websocket", opts.Pool, opts.Type)
	}
	return c, nil
}

// target is the Checker's view of one backend. Keyed by *Backend: a backend
// whose address changed is a new *Backend and starts over.
type target struct {
	healthy  bool // as last set by us
	probed   bool // at least one probe finished
	okRun    int  // consecutive passes
	failRun  int  // consecutive failures
	inFlight bool
	due      time.Time
}

type result struct {
	b   *balance.Backend
	err error
	dur time.Duration
}

// Run probes until ctx ends, then waits for probes in flight and returns nil.
//
// A backend seen for the first time is marked unhealthy and probed at once:
// it receives traffic only after its first passing probe, never on Consul's
// word alone (fabio#393). From then on, Rise consecutive passes make it
// healthy and Fall consecutive failures unhealthy. Later probes are spread:
// each backend's second probe comes after a random part of Interval, so a
// pool's backends are not probed in lockstep.
func (c *Checker) Run(ctx context.Context) error {
	var (
		wg      sync.WaitGroup
		results = make(chan result, c.opts.Concurrency)
		sem     = make(chan struct{}, c.opts.Concurrency)
		state   = map[*balance.Backend]*target{}
		snap    *balance.Snapshot
		ticker  = time.NewTicker(c.tick)
	)
	defer ticker.Stop()
	defer wg.Wait()

	for {
		now := time.Now()
		if s := c.opts.Source.Snapshot(); s != snap {
			snap = s
			c.reconcile(state, s, now)
		}
		for b, t := range state {
			if t.inFlight || now.Before(t.due) {
				continue
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // at the concurrency bound; due again next tick
			}
			t.inFlight = true
			wg.Add(1)
			go func() { // owned by Run, which waits for it
				defer wg.Done()
				defer func() { <-sem }()
				results <- c.probeOne(ctx, b)
			}()
		}
		select {
		case <-ctx.Done():
			// Drain results so probe goroutines can finish.
			go func() { wg.Wait(); close(results) }()
			for range results {
			}
			return nil
		case r := <-results:
			c.record(state, r, time.Now())
		case <-ticker.C:
		}
	}
}

// reconcile starts tracking new backends and forgets removed ones.
func (c *Checker) reconcile(state map[*balance.Backend]*target, s *balance.Snapshot, now time.Time) {
	present := make(map[*balance.Backend]bool, len(s.Backends))
	for _, b := range s.Backends {
		present[b] = true
		if _, ok := state[b]; ok {
			continue
		}
		// balance starts backends healthy; with active checks a backend
		// must earn traffic first.
		b.SetHealthy(false)
		state[b] = &target{due: now}
		c.opts.Logger.Debug("health: new backend, unavailable until its first passing probe", "backend", b.ID())
	}
	for b := range state {
		if !present[b] {
			delete(state, b)
		}
	}
}

func (c *Checker) probeOne(ctx context.Context, b *balance.Backend) (r result) {
	r.b = b
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			r.err = fmt.Errorf("probe panic: %v", p)
		}
		r.dur = time.Since(start)
	}()
	pctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	r.err = c.prober.probe(pctx, b.Addr())
	if r.err != nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
		r.err = fmt.Errorf("timeout after %v: %w", c.opts.Timeout, r.err)
	}
	return r
}

// record applies one probe result to the thresholds.
func (c *Checker) record(state map[*balance.Backend]*target, r result, now time.Time) {
	ok := r.err == nil
	// Report after the state is applied, so an observer sees its effect.
	defer c.opts.Observer.ProbeResult(c.opts.Pool, r.b.ID(), ok, r.dur)
	t := state[r.b]
	if t == nil {
		return // removed while probing
	}
	t.inFlight = false
	first := !t.probed
	t.probed = true
	if first {
		t.due = now.Add(time.Duration(rand.Int64N(int64(c.opts.Interval)) + 1))
	} else {
		t.due = now.Add(c.opts.Interval)
	}
	if ok {
		t.okRun, t.failRun = t.okRun+1, 0
	} else {
		t.okRun, t.failRun = 0, t.failRun+1
	}
	switch {
	case !t.healthy && ok && (first || t.okRun >= c.opts.Rise):
		t.healthy = true
	case t.healthy && !ok && t.failRun >= c.opts.Fall:
		t.healthy = false
	default:
		if !ok && first {
			c.opts.Logger.Info("health: new backend failed its first probe", "backend", r.b.ID(), "addr", r.b.Addr(), "err", statusText(r.err))
		}
		return
	}
	if r.b.SetHealthy(t.healthy) {
		if t.healthy {
			c.opts.Logger.Info("health: backend healthy", "backend", r.b.ID(), "addr", r.b.Addr(), "dur", r.dur)
		} else {
			c.opts.Logger.Info("health: backend unhealthy", "backend", r.b.ID(), "addr", r.b.Addr(), "err", statusText(r.err), "fails", t.failRun)
		}
	}
}

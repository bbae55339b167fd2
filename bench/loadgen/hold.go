package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/bench/internal/stats"
	"github.com/edgelb/edge/bench/internal/wire"
)

// holder is the hold workload: -conns connections that each live on
// their own, as a browser tab does. Every connection dials, echoes once,
// then either waits for messages (answering the proxy's pings while it
// reads) or, for the first -active of them, echoes -size bytes -rate times
// a second, latency measured from the scheduled send time. A connection
// that ends (the proxy was killed, restarted or closed it) reconnects
// after a random delay below -reconnect-jitter, and a failed dial retries
// the same way, so a restarted proxy meets a spread-out storm rather than
// one synchronised burst.
type holder struct {
	g *gen

	up          atomic.Int64  // connections currently upgraded
	established atomic.Uint64 // upgrades completed, reconnects included
	ended       atomic.Uint64 // connections that ended after their upgrade
	messages    atomic.Uint64

	histMu sync.Mutex
	hist   stats.Histogram // since the last CmdStats
}

// runHold runs the hold workload until ctx ends or CmdStop. It answers
// every CmdStats with an EventStats: Conns the connections up now, Ops the
// upgrades so far, Messages the active echoes so far, and Latency the
// active echoes since the previous CmdStats.
func (g *gen) runHold(ctx context.Context, cmds <-chan string) error {
	h := &holder{g: g}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	active := min(g.c.active, g.c.conns)
	var wg sync.WaitGroup
	sem := make(chan struct{}, g.c.dialConc)
	for i := range g.c.conns {
		wg.Go(func() { h.conn(ctx, i, i < active, sem) })
	}
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case cmd := <-cmds:
			switch cmd {
			case wire.CmdStats:
				h.histMu.Lock()
				snap := h.hist.Clone()
				h.hist = stats.Histogram{}
				h.histMu.Unlock()
				g.emit(wire.Event{Event: wire.EventStats, Conns: int(h.up.Load()), Ops: h.established.Load(),
					Messages: h.messages.Load(), Ended: h.ended.Load(), Latency: snap})
			case wire.CmdStop:
				cancel()
			}
		}
	}
}

// conn keeps connection i up until ctx ends. The first dial waits for a
// place among -dial-concurrency; so do reconnects, after their jitter.
func (h *holder) conn(ctx context.Context, i int, active bool, sem chan struct{}) {
	cfg := h.g.tlsConfig(nil)
	msg := h.g.payload[:min(16, len(h.g.payload))]
	buf := make([]byte, len(h.g.payload))
	first := true
	for ctx.Err() == nil {
		if !first && !sleepCtx(ctx, time.Duration(rand.Int64N(int64(h.g.c.jitter)+1))) {
			return
		}
		first = false
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		c, err := h.g.dial(ctx, h.g.src(i), cfg)
		if err == nil {
			if err = c.echo(msg, buf, h.g.c.timeout); err != nil {
				c.close()
			}
		}
		<-sem
		if err != nil {
			if ctx.Err() == nil {
				h.g.fail(err)
			}
			continue
		}
		h.established.Add(1)
		h.up.Add(1)
		if active {
			err = h.echoLoop(ctx, c, buf)
		} else {
			err = h.wait(ctx, c, buf)
		}
		h.up.Add(-1)
		c.close()
		if ctx.Err() != nil {
			return
		}
		h.ended.Add(1)
		h.g.fail(fmt.Errorf("connection ended: %w", err))
	}
}

// wait reads until the connection ends: pings are answered inside
// readMessage, and a message from the server (none is expected) is
// dropped.
func (h *holder) wait(ctx context.Context, c *conn, buf []byte) error {
	stop := context.AfterFunc(ctx, c.close)
	defer stop()
	// The pongs are written while reading: the echo's write deadline
	// would fail the first one after it passed.
	_ = c.tls.SetWriteDeadline(time.Time{})
	for {
		if _, err := c.ws.readMessage(buf, time.Time{}); err != nil {
			return err
		}
	}
}

// echoLoop echoes -size bytes -rate times a second, from a random phase,
// until the connection fails or ctx ends.
func (h *holder) echoLoop(ctx context.Context, c *conn, buf []byte) error {
	period := time.Duration(float64(time.Second) / h.g.c.rate)
	next := time.Now().Add(time.Duration(rand.Int64N(int64(period))))
	for {
		if !sleepCtx(ctx, time.Until(next)) {
			return ctx.Err()
		}
		if err := c.echo(h.g.payload, buf, h.g.c.timeout); err != nil {
			return fmt.Errorf("active echo: %w", err)
		}
		lat := time.Since(next)
		h.histMu.Lock()
		h.hist.Record(lat)
		h.histMu.Unlock()
		h.messages.Add(1) // after the histogram: a CmdStats never counts an echo it has no latency of
		next = next.Add(period)
		if d := time.Since(next); d > period {
			// Stalled for more than a period (a restart): start again from now
			// rather than sending the missed messages back to back.
			next = time.Now()
		}
	}
}

// sleepCtx sleeps d, or returns false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

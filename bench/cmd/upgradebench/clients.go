package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/edgelb/edge/bench/internal/wire"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// msgSize is the size of every echoed message of the live connections.
const msgSize = 100

// sample is one echoed message: when it was due to be sent (from the start
// of the run) and how long until its echo was read, measured from that
// scheduled time, so that a stalled client or proxy cannot hide queueing.
type sample struct {
	Sent time.Duration
	RTT  time.Duration
}

// failure is the first error a live connection or a probe saw.
type failure struct {
	At   time.Duration `json:"at_ms"`
	Conn string        `json:"conn"`
	Err  string        `json:"err"`
	// Close is true when the error is a WebSocket close frame (a 1012 or
	// 1001 from the proxy) rather than a broken or stalled stream.
	Close bool `json:"close"`
}

// dialer makes WebSocket connections from the source addresses of one run.
type dialer struct {
	plain, secure string // ws:// and wss:// URLs
	tls           *tls.Config
	srcs          []netip.Addr
	timeout       time.Duration
}

// dial opens the i-th connection, wss when secure, from the i-th source
// address.
func (d *dialer) dial(ctx context.Context, i int, secure bool) (*websocket.Conn, error) {
	src := d.srcs[i%len(d.srcs)]
	nd := wire.SourceDialer(src, d.timeout)
	wd := &websocket.Dialer{
		NetDialContext:   nd.DialContext,
		TLSClientConfig:  d.tls,
		HandshakeTimeout: d.timeout,
		ReadBufferSize:   1024,
		WriteBufferSize:  1024,
	}
	u := d.plain
	if secure {
		u = d.secure
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	c, resp, err := wd.DialContext(ctx, u, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", u, src, err)
	}
	return c, nil
}

// live is one long-lived connection echoing a message every second.
type live struct {
	name    string
	ws      *websocket.Conn
	samples []sample
	fail    *failure
}

// echo sends msg and reads its echo into buf, checking it came back intact.
func echo(ws *websocket.Conn, msg, buf []byte, timeout time.Duration) error {
	dl := time.Now().Add(timeout)
	_ = ws.SetWriteDeadline(dl)
	if err := ws.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	_ = ws.SetReadDeadline(dl)
	_, r, err := ws.NextReader()
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	n, err := io.ReadFull(r, buf[:len(msg)])
	if err != nil {
		return fmt.Errorf("read %d of %d bytes: %w", n, len(msg), err)
	}
	if extra, _ := io.Copy(io.Discard, r); extra > 0 {
		return fmt.Errorf("echo of %d bytes came back with %d more", len(msg), extra)
	}
	if !bytes.Equal(buf[:len(msg)], msg) {
		return errors.New("echo differs from the message sent")
	}
	return nil
}

// run echoes one message a second, the first at t0+phase, until ctx ends or
// an error, which it keeps and stops on (the connection is not reopened:
// the benchmark counts every connection that did not survive).
func (l *live) run(ctx context.Context, t0 time.Time, phase, timeout time.Duration) {
	msg := make([]byte, msgSize)
	buf := make([]byte, msgSize)
	copy(msg[8:], l.name)
	next := t0.Add(phase)
	tm := time.NewTimer(time.Until(next))
	defer tm.Stop()
	for seq := uint64(0); ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tm.C:
		}
		binary.BigEndian.PutUint64(msg, seq)
		if err := echo(l.ws, msg, buf, timeout); err != nil {
			l.fail = newFailure(time.Since(t0), l.name, err)
			return
		}
		l.samples = append(l.samples, sample{Sent: next.Sub(t0), RTT: time.Since(next)})
		next = next.Add(time.Second)
		tm.Reset(time.Until(next))
	}
}

func newFailure(at time.Duration, conn string, err error) *failure {
	var ce *websocket.CloseError
	return &failure{At: at, Conn: conn, Err: err.Error(), Close: errors.As(err, &ce)}
}

// probe is one connection of the prober: opened, one echo, closed.
type probe struct {
	Start time.Duration
	Took  time.Duration
	Err   error
}

// prober opens a connection every interval, alternately ws and wss, each
// with one 16-byte echo and a close handshake, until ctx ends; it returns
// every probe once all have finished.
func prober(ctx context.Context, d *dialer, t0 time.Time, every, timeout time.Duration) []probe {
	var (
		mu  sync.Mutex
		out []probe
		wg  sync.WaitGroup
	)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return out
		case <-tk.C:
		}
		wg.Go(func() {
			start := time.Now()
			err := probeOnce(d, i, timeout)
			mu.Lock()
			out = append(out, probe{Start: start.Sub(t0), Took: time.Since(start), Err: err})
			mu.Unlock()
		})
	}
}

// probeOnce is one probe, its own context so that the end of the run does
// not fail a probe under way.
func probeOnce(d *dialer, i int, timeout time.Duration) error {
	ws, err := d.dial(context.Background(), i, i%2 == 1)
	if err != nil {
		return err
	}
	defer ws.Close()
	msg := []byte(fmt.Sprintf("probe %10d", i))
	if err := echo(ws, msg, make([]byte, len(msg)), timeout); err != nil {
		return fmt.Errorf("probe %d: %w", i, err)
	}
	return closeHandshake(ws, timeout)
}

// closeHandshake sends a close frame (1000) and reads until the peer's
// answer, which must be the backend's echo of it (RFC 6455 section 5.5.1):
// a probe that the proxy closed after its echo (a 1012 from an upgrade)
// fails too, not only one closed before.
func closeHandshake(ws *websocket.Conn, timeout time.Duration) error {
	dl := time.Now().Add(timeout)
	if err := ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), dl); err != nil {
		return fmt.Errorf("write close: %w", err)
	}
	_ = ws.SetReadDeadline(dl)
	for {
		_, r, err := ws.NextReader()
		var ce *websocket.CloseError
		switch {
		case errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseNoStatusReceived):
			return nil
		case err != nil:
			return fmt.Errorf("close handshake: %w", err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return fmt.Errorf("close handshake: %w", err)
		}
	}
}

// connectAll opens n live connections, the even ones ws and the odd ones
// wss, conc at a time; the first error fails them all.
func connectAll(ctx context.Context, d *dialer, n, conc int) ([]*live, error) {
	out := make([]*live, n)
	errs := make([]error, n)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			secure := i%2 == 1
			ws, err := d.dial(ctx, i, secure)
			if err != nil {
				errs[i] = err
				return
			}
			name := fmt.Sprintf("ws-%d", i)
			if secure {
				name = fmt.Sprintf("wss-%d", i)
			}
			out[i] = &live{name: name, ws: ws}
		})
	}
	wg.Wait()
	failed, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > 0 {
		closeAll(out)
		return nil, fmt.Errorf("open %d connections: %d failed, the first: %w", n, failed, first)
	}
	return out, nil
}

// closeAll closes every connection with a close handshake's first half;
// the proxy forwards it and the backend closes.
func closeAll(ls []*live) {
	for _, l := range ls {
		if l == nil {
			continue
		}
		_ = l.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		_ = l.ws.Close()
	}
}

package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// TestRecordLayerDrainUnderTraffic: many TLS 1.3 WebSockets on edge's
// record layer echo small and 20 KiB messages, rest (their ciphers
// dropped), echo again, and meanwhile Drain injects its close 1001
// between frames (recConn.Write from the runner while the closing side
// may seal a close_notify): every client gets its 1001 after intact
// echoes, nothing is left in the key log, and the race detector sees the
// record state used under its lock only. Frame-aware mode on and off.
func TestRecordLayerDrainUnderTraffic(t *testing.T) {
	for _, frameAware := range []bool{false, true} {
		t.Run("frame-aware="+strconv.FormatBool(frameAware), func(t *testing.T) {
			drainUnderTraffic(t, frameAware, 100, 200)
		})
	}
}

func drainUnderTraffic(t *testing.T, frameAware bool, conns, msgs int) {
	e, _ := oneBackendEdge(t, spliceReadiness, true, func(p *Pool, _ *edgeConfig) {
		if frameAware {
			p.PingInterval = time.Minute
			p.MaxFrameBytes = 1 << 20
		}
	})
	cs := make([]*websocket.Conn, conns)
	for i := range cs {
		cs[i], _ = e.dialWS(t, "/", nil)
		cs[i].SetReadDeadline(time.Now().Add(60 * time.Second))
	}
	// Phase 1: traffic, then rest.
	for i, err := range onEach(cs, func(i int, c *websocket.Conn) error {
		for k := range 20 {
			if err := echoNumbered(c, i, k); err != nil {
				return err
			}
		}
		return nil
	}) {
		if err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
	}
	testkit.WaitFor(t, "every connection to rest", func() bool { return e.srv.restedConns() == conns })

	// Phase 2: traffic again, and a drain part-way through.
	var (
		sent      atomic.Int64
		beforeAll bool // the drain came while traffic was under way; read after drained
	)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		// Not testkit.WaitFor: it may not fail the test off the test's
		// goroutine. A stall is reported below, after the drain that ends
		// the clients waiting for their 1001.
		want := int64(conns * msgs / 4)
		for deadline := time.Now().Add(60 * time.Second); sent.Load() < want && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond) // polling: the count has no event to wait on
		}
		beforeAll = sent.Load() >= want
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e.srv.Drain(ctx, 500*time.Millisecond)
	}()
	errs := onEach(cs, func(i int, c *websocket.Conn) error {
		// Gone once its close 1001 came and was answered, so that edge's
		// lingering close ends at the client's FIN.
		defer c.Close()
		return echoUntilGoingAway(c, i, 20, msgs, &sent)
	})
	<-drained
	if !beforeAll {
		t.Errorf("traffic stalled: %d of %d messages sent in a minute before the drain", sent.Load(), conns*msgs/4)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("conn %d: %v", i, err)
		}
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != int64(conns) || kept != 0 {
		t.Errorf("takeovers: owned %d, kept %d; want %d, 0", owned, kept, conns)
	}
	testkit.WaitFor(t, "an empty key log", func() bool { return e.rl.keys.Len() == 0 })
}

// onEach runs f on every conn at once and returns their errors.
func onEach(cs []*websocket.Conn, f func(i int, c *websocket.Conn) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i, c) }()
	}
	wg.Wait()
	return errs
}

// echoNumbered sends message k of conn i (every tenth one 20 KiB long)
// and checks its echo.
func echoNumbered(c *websocket.Conn, i, k int) error {
	msg := []byte(fmt.Sprintf("c%d m%d ", i, k))
	if k%10 == 0 {
		msg = append(msg, bytes.Repeat([]byte{byte(k)}, 20<<10)...)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		return err
	}
	_, got, err := c.ReadMessage()
	if err == nil && !bytes.Equal(got, msg) {
		err = fmt.Errorf("echo of %d bytes differs (%d back)", len(msg), len(got))
	}
	return err
}

// echoUntilGoingAway echoes messages from..from+n on c, counting them in
// sent, until a close 1001 comes; after the last one it waits for it.
func echoUntilGoingAway(c *websocket.Conn, i, from, n int, sent *atomic.Int64) error {
	var err error
	for k := from; k < from+n && err == nil; k++ {
		if err = echoNumbered(c, i, k); err == nil {
			sent.Add(1)
		}
	}
	if err == nil {
		_, _, err = c.ReadMessage()
	}
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code == websocket.CloseGoingAway {
		return nil
	}
	return fmt.Errorf("%v, want close 1001", err)
}

// TestRecordLayerLargeMessages: 1 MiB and 16 MiB messages both ways at
// once (the client writes while the echo comes back) through edge's
// record layer, frame-aware mode on and off.
func TestRecordLayerLargeMessages(t *testing.T) {
	for _, frameAware := range []bool{false, true} {
		t.Run("frame-aware="+strconv.FormatBool(frameAware), func(t *testing.T) {
			e, _ := oneBackendEdge(t, spliceReadiness, true, func(p *Pool, _ *edgeConfig) {
				if frameAware {
					p.PingInterval = time.Minute
					p.MaxFrameBytes = 32 << 20
				}
			})
			c, _ := e.dialWS(t, "/", nil)
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			sizes := []int{1 << 20, 16 << 20, 1 << 20, 16 << 20}
			wrote := make(chan error, 1)
			go func() {
				for i, n := range sizes {
					if err := c.WriteMessage(websocket.BinaryMessage, pattern(n, i)); err != nil {
						wrote <- err
						return
					}
				}
				wrote <- nil
			}()
			for i, n := range sizes {
				_, got, err := c.ReadMessage()
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if !bytes.Equal(got, pattern(n, i)) {
					t.Fatalf("message %d of %d bytes: echo differs (%d back)", i, n, len(got))
				}
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			if owned, _ := e.srv.RecordLayerTakeovers(); owned != 1 {
				t.Fatalf("%d connections on the record layer, want 1", owned)
			}
		})
	}
}

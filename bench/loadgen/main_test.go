package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/edgelb/edge/bench/internal/wire"
	"github.com/edgelb/edge/internal/testbackend"
)

// TestIdleEcho holds connections in idle mode and checks that the echo
// command exercises every one of them while they are held.
func TestIdleEcho(t *testing.T) {
	be, err := testbackend.Start("b1")
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	// The generator speaks wss; the backend's handler behind a TLS listener
	// stands in for the proxy.
	srv := httptest.NewTLSServer(be)
	defer srv.Close()

	c := config{
		mode: "idle", target: srv.Listener.Addr().String(), host: "localhost", path: "/echo",
		conns: 5, size: 100, dialConc: 2, srcBase: netip.MustParseAddr("127.0.0.2"), srcCount: 2,
		timeout: 5 * time.Second,
	}
	g := newGen(c)
	pr, pw := io.Pipe()
	g.out = json.NewEncoder(pw)
	events := make(chan wire.Event, 8)
	go func() {
		dec := json.NewDecoder(pr)
		for {
			var e wire.Event
			if dec.Decode(&e) != nil {
				close(events)
				return
			}
			events <- e
		}
	}()
	next := func(want string) wire.Event {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok || e.Event != want {
				t.Fatalf("event %+v (open %v), want %q", e, ok, want)
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q event", want)
		}
		return wire.Event{}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmds := make(chan string)
	done := make(chan error, 1)
	go func() { done <- g.run(ctx, cmds) }()

	if e := next(wire.EventReady); e.Conns != 5 || e.Errors != 0 {
		t.Fatalf("ready %+v, want 5 connections and no errors", e)
	}
	cmds <- wire.CmdEcho
	if e := next(wire.EventEchoed); e.Conns != 5 || e.Messages != 5 || e.Errors != 0 {
		t.Fatalf("echoed %+v, want 5 of 5", e)
	}
	// After the measured window too.
	cmds <- wire.CmdStart
	cmds <- wire.CmdStop
	next(wire.EventResult)
	cmds <- wire.CmdEcho
	if e := next(wire.EventEchoed); e.Messages != 5 {
		t.Fatalf("echoed after the window %+v, want 5", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

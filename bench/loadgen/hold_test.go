package main

import (
	"testing"
	"time"

	"github.com/edgelb/edge/bench/internal/wire"
)

// TestHoldReconnects: in hold mode every connection comes up, the active
// ones echo, and when the server drops them all they come back by
// themselves, with both clients.
func TestHoldReconnects(t *testing.T) {
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			h := startGen(t, config{mode: "hold", client: client, conns: 4, active: 1, rate: 20, size: 100,
				jitter: 50 * time.Millisecond, maxLife: time.Minute})
			stats := func() wire.Event {
				h.cmds <- wire.CmdStats
				return h.next(wire.EventStats)
			}
			var e wire.Event
			var timed uint64 // latencies since the first CmdStats, which each CmdStats restarts
			h.await("4 connections up and an active echo", func() bool {
				e = stats()
				if e.Latency != nil {
					timed += e.Latency.N
				}
				return e.Conns == 4 && e.Messages > 0
			})
			if timed < e.Messages {
				t.Fatalf("%d latencies recorded for %d echoes", timed, e.Messages)
			}
			h.drop()
			h.await("every connection back", func() bool { e = stats(); return e.Conns == 4 && e.Ops >= 8 })
			if e.Ended < 4 {
				t.Fatalf("ended %d after the server dropped 4", e.Ended)
			}
			h.cmds <- wire.CmdStop
			if err := <-h.done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

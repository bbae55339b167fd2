package ready

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelb/edge/proxy/internal/wsession"
)

// boxHandler is the sweeper's view of one connection of the full box
// (issue 22): a session pinging every 30 s with a 90 s ping timeout and a
// long idle timeout, swept the way proxy's readyState.Sweep does it
// (Tick, then NextTick and the rest's deadline). A ping it asks for is
// written and answered at once, and the run that does it marks the
// connection, as the proxy's wake and Kick do.
type boxHandler struct {
	c    *Conn
	sess wsession.Session
}

var boxConfig = wsession.Config{
	PingInterval:  30 * time.Second,
	PingTimeout:   90 * time.Second,
	IdleTimeout:   time.Hour,
	WriteTimeout:  10 * time.Second,
	LingerTimeout: time.Second,
}

var pong = []byte{0x8a, 0x80, 1, 2, 3, 4}

func (h *boxHandler) Step() {}

func (h *boxHandler) Panicked(any) {}

func (h *boxHandler) Sweep(now int64) int64 {
	if h.sess.Tick(now, h.c.cs.QueuedSince()).Kind == wsession.Ping {
		ctl := h.sess.BackendControl()
		h.sess.ControlWritten(ctl, now)
		h.answer(now)
	}
	next := h.sess.NextTick(h.c.cs.QueuedSince())
	if last := h.sess.LastActivity(); now-last < int64(time.Second) {
		next = min(next, last+int64(time.Second)) // the rest
	}
	return next
}

// answer is the client's pong or message at now, and the run it causes.
func (h *boxHandler) answer(now int64) {
	h.sess.FromClient(pong, now)
	h.sess.Touch(now)
	h.c.ran()
}

// boxRuntime is a Runtime holding n idle connections of the box over two
// pollers without epoll (100,000 connections are 200,000 sockets, far
// over this host's descriptor limit; the sweeper never touches one),
// their last activity spread over one ping interval, each visited once.
func boxRuntime(n int, start int64) (*Runtime, []*boxHandler, *schedule[*Conn]) {
	rt := New(Options{})
	// The tick's work, without its pauses (sweepSlice): a clock that
	// stands still never ends a slice.
	rt.clock = func() int64 { return start }
	rt.polls = []*poller{{}, {}}
	hs := make([]*boxHandler, n)
	iv := int64(boxConfig.PingInterval)
	for i := range hs {
		h := &boxHandler{}
		h.sess.Init(&boxConfig, start-iv+int64(i)*iv/int64(n))
		h.c = NewConn(h, -1, -1)
		p := rt.polls[i%len(rt.polls)]
		h.c.p = p
		h.c.id.Store(p.add(h.c))
		p.markDirty(h.c)
		hs[i] = h
	}
	sched := new(schedule[*Conn])
	rt.tick(context.Background(), sched, nil, start)
	return rt, hs, sched
}

// everyTick is the sweeper's tick before it kept a schedule: every
// registered connection visited (the map walk and Sweep).
func everyTick(rt *Runtime, buf []*Conn, now int64) []*Conn {
	buf = buf[:0]
	for _, p := range rt.polls {
		p.mu.RLock()
		for _, c := range p.conns {
			if c != nil {
				buf = append(buf, c)
			}
		}
		p.mu.RUnlock()
	}
	for _, c := range buf {
		rt.sweep(c, now)
	}
	clear(buf)
	return buf
}

// BenchmarkSweepTick: one tick of the sweeper holding 100,000 idle
// connections of the box, per tick (ns/op, allocs/op).
//
//   - idle: nothing due and nothing ran since the last tick;
//   - second: the tick of one second of the box: about 1/30 of the
//     connections due for a ping (answered), and 1 % of them sending a
//     message (a run);
//
// each with the schedule (due) and with the visit of every connection at
// every tick that it replaced (every).
//
//	go test -run '^$' -bench BenchmarkSweepTick -benchtime 200x ./proxy/internal/ready
func BenchmarkSweepTick(b *testing.B) {
	const n = 100_000
	start := time.Now().UnixNano()
	for _, load := range []string{"idle", "second"} {
		for _, way := range []string{"due", "every"} {
			b.Run(fmt.Sprintf("conns=%d/%s/%s", n, load, way), func(b *testing.B) {
				rt, hs, sched := boxRuntime(n, start)
				r := rand.New(rand.NewPCG(1, 2))
				var buf []*Conn
				now := start
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if load == "second" {
						now += int64(time.Second)
						b.StopTimer()
						for range n / 100 {
							hs[r.IntN(n)].answer(now - int64(time.Millisecond))
						}
						b.StartTimer()
					}
					if way == "due" {
						buf = rt.tick(context.Background(), sched, buf, now)
					} else {
						buf = everyTick(rt, buf, now)
					}
				}
			})
		}
	}
}

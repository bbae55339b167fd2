package wsession

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// sweep is the clock step of the model of the readiness splice, and the
// unit of every timeout and clock step in FuzzSessionEnding, so that both
// drivers' ticks fall on the same instants.
const sweep = int64(100 * time.Millisecond)

// endDriver is a model of a driver that carries out the session's
// actions the way both of proxy's drivers do (conn.go's act); only when
// it asks the clock differs. exact: at every reader's Deadline, as the
// goroutine splice's read deadlines do; otherwise at sweeps, as the
// readiness splice's sweeper does: at every one, or (sched) only at those
// due by NextTick or following an event (dirty), as its schedule does.
type endDriver struct {
	s     Session
	exact bool
	sched bool
	now   int64

	dirty bool  // sched: something touched the session since the last tick
	due   int64 // sched: NextTick after the last tick

	ended, lingering   bool
	c2bDone, b2cDone   bool
	halfClosed         []Side
	controls           []string // frames written to the client, with their instants
	ticks, deadlineHit int
	finAt              int64 // the FIN timer; 0: not armed
}

func (d *endDriver) act(a Action) {
	switch a.Kind {
	case Ping, Close:
		d.control()
	case HalfClose:
		d.halfClosed = append(d.halfClosed, a.Side)
		if d.finAt == 0 {
			d.finAt = d.now + int64(FinTimeout)
		}
	case Linger:
		d.lingering = true
	case End:
		if a.Flush {
			// Writes are not queued in the model: the flush is done.
			d.act(d.s.Finish(ReasonKeep, false, d.now))
			return
		}
		d.ended = true
	}
}

// control is the backend reader at a boundary (BackendControl).
func (d *endDriver) control() {
	if d.ended || d.lingering || d.b2cDone {
		return
	}
	c := d.s.BackendControl()
	if c.Frame != nil {
		d.controls = append(d.controls, fmt.Sprintf("%d@%d", c.Code, d.now/sweep))
		d.s.ControlWritten(c, d.now)
	}
	if !c.End {
		return
	}
	if c.Flush {
		d.act(Action{Kind: End, Flush: true})
		return
	}
	d.act(d.s.Finish(c.Reason, false, d.now))
}

// advance moves the clock to to, ticking on the way.
func (d *endDriver) advance(t *testing.T, to int64) {
	if !d.exact {
		for next := (d.now/sweep + 1) * sweep; next <= to && !d.ended; next += sweep {
			d.now = next
			if d.fin() {
				return
			}
			if d.visits() {
				d.tick()
			}
		}
		d.now = to
		return
	}
	for n := 0; !d.ended; n++ {
		if n > 1000 {
			t.Fatalf("a reader's deadline stays due at %d: the driver would spin", d.now)
		}
		dl := int64(0)
		for _, side := range d.readers() {
			if x := d.s.Deadline(side); x != 0 && (dl == 0 || x < dl) {
				dl = x
			}
		}
		if d.finAt != 0 && (dl == 0 || d.finAt <= dl) {
			dl = d.finAt
		}
		if dl == 0 || dl > to {
			break
		}
		d.now = max(d.now, dl)
		if d.fin() {
			return
		}
		d.deadlineHit++
		d.tick()
	}
	d.now = to
}

// visits reports whether the sweeper visits the connection at this
// sweep: always, or (sched) when it is due or was touched.
func (d *endDriver) visits() bool {
	return !d.sched || d.dirty || d.due != 0 && d.now >= d.due
}

// touched marks the connection for the sweeper (sched) after op: every
// event but the clock runs the connection.
func (d *endDriver) touched(op byte) {
	if op != 4 && op != 5 {
		d.dirty = true
	}
}

// fin fires the FIN timer when it is due (a timer of its own in both
// drivers) and reports whether the connection ended.
func (d *endDriver) fin() bool {
	if d.finAt == 0 || d.now < d.finAt {
		return false
	}
	d.finAt = 0
	d.dirty = true // the timer's Finish runs the connection
	d.act(d.s.Finish(ReasonFinTimeout, false, d.now))
	return d.ended
}

func (d *endDriver) readers() []Side {
	var r []Side
	if !d.c2bDone || d.lingering {
		r = append(r, SideClient)
	}
	if !d.b2cDone && !d.lingering {
		r = append(r, SideBackend)
	}
	return r
}

func (d *endDriver) tick() {
	d.ticks++
	d.act(d.s.Tick(d.now, 0))
	// The goroutine splice's backend reader looks at the session after
	// every wake of its read; the readiness splice's runner after a wake.
	if d.exact {
		d.control()
	}
	// What the tick's own actions did (a ping written inline) is in the
	// session already: NextTick sees it without a dirty mark.
	d.dirty, d.due = false, d.s.NextTick(0)
}

// both ends the connection the way both drivers do once both streams
// ended.
func (d *endDriver) bothDone() {
	if d.c2bDone && d.b2cDone && !d.ended && !d.lingering {
		d.act(d.s.Finish(ReasonKeep, false, d.now))
	}
}

// backendFrames is the stream the backend sends in the fuzzer: binary
// frames of two bytes, fed in random cuts.
var backendFrame = []byte{0x82, 2, 'a', 'b'}

// FuzzSessionEnding: random client and backend bytes, EOFs, write
// failures, close requests and clock steps, carried out by the model of
// each driver (endDriver), end the connection the same way: the same
// reason, close side and code, the same control frames at the same
// instants, the same half-closes and lingering; and the goroutine
// splice's deadlines never stay due (no reader spins). The sweeper that
// visits only connections due by NextTick or touched since (sched) decides
// exactly what the one that visits every connection at every sweep does.
func FuzzSessionEnding(f *testing.F) {
	// A ping, its timeout and a close 1011, then lingering to its bound.
	f.Add([]byte{5, 10, 5, 10, 5, 10, 5, 40}, uint8(0), uint8(5), uint8(3), uint8(4))
	// A drain mid-frame, the frame's end, the client's FIN.
	f.Add([]byte{7, 1, 8, 0, 7, 2, 5, 1, 0, 0, 5, 30}, uint8(20), uint8(0), uint8(0), uint8(3))
	// A failed write to the backend after the close, then the clock.
	f.Add([]byte{8, 0, 3, 0, 6, 0, 5, 50}, uint8(0), uint8(0), uint8(0), uint8(10))
	// Idle during a lingering close.
	f.Add([]byte{8, 0, 3, 0, 5, 3, 6, 0, 5, 20}, uint8(2), uint8(0), uint8(0), uint8(9))
	f.Fuzz(func(t *testing.T, script []byte, idle, ping, pingTO, linger uint8) {
		cfg := &Config{
			IdleTimeout:   time.Duration(int64(idle%64) * sweep),
			PingInterval:  time.Duration(int64(ping%16) * sweep),
			PingTimeout:   time.Duration(int64(pingTO%16) * sweep),
			LingerTimeout: time.Duration(int64(linger%32) * sweep),
			LingerBytes:   16,
		}
		var outs [3]string
		for i, mode := range []struct{ exact, sched bool }{{true, false}, {false, false}, {false, true}} {
			d := &endDriver{exact: mode.exact, sched: mode.sched, dirty: true}
			d.s.Init(cfg, 0)
			run(t, d, script)
			if !d.ended {
				d.advance(t, d.now+1000*sweep)
			}
			side, code := d.s.ClosedBy(d.s.Reason())
			outs[i] = fmt.Sprintf("ended %v reason %q closed by %s %d lingering %v half %v controls %v",
				d.ended, d.s.Reason(), side, code, d.lingering, d.halfClosed, d.controls)
		}
		if outs[0] != outs[1] {
			t.Fatalf("script % x:\nat deadlines: %s\nat sweeps:    %s", script, outs[0], outs[1])
		}
		if outs[1] != outs[2] {
			t.Fatalf("script % x:\nat every sweep: %s\nat due sweeps:  %s", script, outs[1], outs[2])
		}
	})
}

// run plays script on d: each event is an op byte and an argument byte.
func run(t *testing.T, d *endDriver, script []byte) {
	pos := 0
	for i := 0; i+1 < len(script) && !d.ended; i += 2 {
		op, arg := script[i]%9, script[i+1]
		d.touched(op)
		switch op {
		case 0: // the client's FIN
			if !d.c2bDone && !d.lingering {
				d.c2bDone = true
				d.act(d.s.EOF(SideClient))
				d.bothDone()
			}
		case 1: // the backend's FIN
			if !d.b2cDone && !d.lingering {
				d.b2cDone = true
				d.act(d.s.EOF(SideBackend))
				d.bothDone()
			}
		case 2: // a failed write to the client
			d.act(d.s.WriteFailed(SideClient, errors.New("reset"), d.now))
		case 3: // a failed write to the backend
			if !d.lingering {
				var err error = errors.New("reset")
				if arg&1 == 1 {
					err = timeoutErr{}
				}
				d.act(d.s.WriteFailed(SideBackend, err, d.now))
			}
		case 4, 5: // the clock
			d.advance(t, d.now+int64(arg%64)*sweep)
		case 6: // client bytes
			switch {
			case d.lingering:
				if d.s.Discard(int(arg%8)+1).Kind == End {
					d.ended = true
				}
			case !d.c2bDone:
				d.s.Touch(d.now)
				d.s.FromClient([]byte{0x82, 0x81, 1, 2, 3, 4, 'x'}, d.now)
			}
		case 7: // backend bytes, in cuts
			if d.b2cDone || d.lingering {
				continue
			}
			k := int(arg%5) + 1
			p := make([]byte, 0, k)
			for range k {
				p = append(p, backendFrame[pos%len(backendFrame)])
				pos++
			}
			d.s.Touch(d.now)
			for len(p) > 0 && !d.ended {
				n, v := d.s.FromBackend(p)
				if v == Drop {
					break
				}
				p = p[n:]
				d.control()
			}
		case 8: // a close requested (a drain)
			if d.s.Request(CloseGoingAway, "drain") {
				d.control()
			}
		}
	}
}

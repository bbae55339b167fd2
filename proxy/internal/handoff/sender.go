package handoff

import "time"

// Defaults of Options, decided here and nowhere else.
//
// How many messages a sender keeps in flight (sent, their answers not read
// yet), and how many of their bytes. One at a time, a hand-off costs a
// round trip per connection, and on a loaded host a round trip is the
// other process's scheduling delay: milliseconds, so 9,000 connections
// took 42 to 71 s. With a window the round trips overlap, and the cost is
// the two processes' own work per connection. The window stays well
// within what the kernel holds without blocking either end: each message
// carries 2 descriptors, and the kernel refuses SCM_RIGHTS (ETOOMANYREFS)
// once a user's descriptors in flight, all its processes together, pass
// its RLIMIT_NOFILE (unix(7)): 12 processes handing off at once hold
// 1,536 at most. The messages in flight are charged to this end's send
// buffer and the peer's one-byte answers (about 768 bytes of kernel
// memory each) to the peer's until read here; net.core.wmem_default,
// 208 KiB on most systems, takes 64 of either with room to spare, so
// neither end blocks on a full buffer while the other waits for it.
//
// How long a sender waits for the peer's next answer while messages are
// in flight (from the last answer, or from a message sent when none was):
// the bound is progress, not the count, so a hand-off of many connections
// to a slow peer goes on as long as the peer keeps taking them. Adopt
// answers within microseconds of reading a message; a peer silent this
// long is stopped, starved or deadlocked, and the hand-off ends as when
// its context ends (ErrStalled).
//
// How long a sender keeps retrying connections that were busy or had
// bytes queued, and the pause between two rounds: a queue drains as fast
// as its peer reads, and one that does not within the bound stays behind
// (the proxy closes it 1012). The bound is time, not a count of rounds:
// on a loaded host a run or a queue lasts longer than a few milliseconds,
// and a fixed count closed live connections that would have moved a
// moment later.
const (
	DefaultWindow      = 64
	DefaultWindowBytes = 64 << 10
	DefaultStall       = 10 * time.Second
	DefaultRetryFor    = 2 * time.Second
	DefaultRetryWait   = 5 * time.Millisecond
)

// Options bound a sender (Move); a zero field takes its default.
type Options struct {
	Window      int           // messages in flight at most (DefaultWindow)
	WindowBytes int           // and their bytes (DefaultWindowBytes)
	Stall       time.Duration // the wait for the peer's next answer (DefaultStall)
	RetryFor    time.Duration // how long busy connections are retried (DefaultRetryFor)
	RetryWait   time.Duration // the pause between two rounds (DefaultRetryWait)
}

// withDefaults is o with every zero or negative field at its default: the
// one place they are decided.
func (o Options) withDefaults() Options {
	return Options{
		Window:      orDefault(o.Window, DefaultWindow),
		WindowBytes: orDefault(o.WindowBytes, DefaultWindowBytes),
		Stall:       orDefault(o.Stall, DefaultStall),
		RetryFor:    orDefault(o.RetryFor, DefaultRetryFor),
		RetryWait:   orDefault(o.RetryWait, DefaultRetryWait),
	}
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Result is what one attempt to hold a connection still came to.
type Result int

const (
	Held  Result = iota // held still: its message goes to the peer
	Busy                // a run in progress or bytes queued: tried again next round
	Never               // it cannot move: it stays here
	Gone                // it ended meanwhile
	// What a send came to, the sender's own.
	sent   // in flight: its answer decides
	broken // the socket to the peer failed: nothing more moves
)

// Conn is a connection a sender tries to move.
type Conn interface {
	// Freeze holds the connection still and readies its move: the item
	// and its message (Encode's), or nil and why it cannot move now.
	// Whatever Freeze held is given back by the item's Thaw or Forget.
	Freeze() (Item, []byte, Result)
}

// Item is a connection held still for its move, from Freeze until the
// peer's answer (or the hand-off's end) settles it with Thaw or Forget,
// exactly one of them, once.
type Item interface {
	// FDs are the descriptors that go with its message: the client's
	// socket, then the backend's.
	FDs() (client, backend int)
	// Thaw gives the connection back: it stays in this process.
	Thaw()
	// Forget drops the connection: the peer holds it (or may, and so
	// it must not run here again).
	Forget()
}

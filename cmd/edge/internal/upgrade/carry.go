package upgrade

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Carrying state to the new process.
//
// Some of what a process holds lives only in its memory and is lost with
// it unless handed on: the session-ticket keys edge generates itself are
// the case in point (a new process with keys of its own makes every
// client's ticket useless, tls/ticketstate.go). A component registers what
// it carries with Carry; at each attempt the Upgrader asks it for its state
// and passes that as one more named descriptor: a pipe whose read end the
// new process inherits, the state already in the pipe's buffer and its
// write end closed. The new process reads it with Carried before Ready,
// bounded in size. So the state never touches a disk nor the environment
// (which /proc shows to the user's other processes), and this process's
// copy of the read end is closed as soon as the attempt is over, whatever
// its outcome. A state over MaxCarried is not passed; an edge that does
// not know the name closes the descriptor at Ready, as it does any
// inherited file it does not claim.

// MaxCarried bounds one carried state: it must fit a pipe's buffer (64
// KiB on Linux, 16 KiB at first on the BSDs), so that writing it never
// waits for a reader.
const MaxCarried = 16 << 10

// carryPrefix names carried states among the passed files.
const carryPrefix = "carry:"

// Carry registers state, asked at each upgrade attempt for what to hand
// the new process under n (nil: nothing this time). The returned bytes
// are the Upgrader's: it clears them once in the pipe.
func (u *Upgrader) Carry(n string, state func() []byte) {
	if u == nil || u.off != nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.carriers == nil {
		u.carriers = map[string]func() []byte{}
	}
	u.carriers[n] = state
}

// Carried returns the state the process that started this one carried
// under n, or nil when it carried none. It must be taken before Ready.
func (u *Upgrader) Carried(n string) ([]byte, error) {
	if !u.HasParent() {
		return nil, nil
	}
	f := u.files.take(carryPrefix + n)
	if f == nil {
		return nil, nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxCarried+1))
	switch {
	case err != nil:
		clear(b)
		return nil, fmt.Errorf("carried %s: %w", n, err)
	case len(b) > MaxCarried:
		clear(b)
		return nil, fmt.Errorf("carried %s: over %d bytes", n, MaxCarried)
	}
	return b, nil
}

// putCarriedLocked passes each carrier's state for the next attempt and
// returns the names to drop once it is over. Called with u.mu held.
func (u *Upgrader) putCarriedLocked() []name {
	var put []name
	for n, state := range u.carriers {
		b := state()
		if len(b) == 0 {
			continue
		}
		f, err := carriedPipe(b)
		clear(b)
		if err != nil {
			u.log.Warn("upgrade: state not carried to the new process", "what", n, "err", err)
			continue
		}
		key := name{kindFile, carryPrefix + n}
		u.files.put(key, f)
		put = append(put, key)
	}
	return put
}

// carriedPipe returns the read end of a pipe holding b, its write end
// closed.
func carriedPipe(b []byte) (*os.File, error) {
	if len(b) > MaxCarried {
		return nil, fmt.Errorf("%d bytes, over %d", len(b), MaxCarried)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(b)
	err = errors.Join(err, w.Close())
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

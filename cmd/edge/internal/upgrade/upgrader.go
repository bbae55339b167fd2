package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// HandoffName names the socket over which live connections move from the
// old process to the new one.
const HandoffName = "edge-handoff"

// DefaultTimeout is how long a new process may take to become ready when
// Options.Timeout is 0.
const DefaultTimeout = time.Minute

// ErrRefused is wrapped by the error of an upgrade that may not start now;
// the text after it says why.
var ErrRefused = errors.New("upgrade refused")

// errStopped is an upgrade attempted or interrupted after Stop.
var errStopped = errors.New("this process is stopping")

// Options are what an Upgrader starts a new process with.
type Options struct {
	// Child is the new process: Path is what an upgrade starts unless
	// told another (edge passes SelfBinary()), Args, Env and Dir are
	// passed as they are.
	Child Child
	// Timeout bounds how long a new process may take to become ready;
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// Log receives the upgrade's events; nil means none.
	Log *slog.Logger
	// Gate, when set, paces upgrades across a fleet: an upgrade takes one
	// of its slots before starting the new process, waiting up to
	// GateWait, and gives it back when the upgrade failed or, after a
	// success, at HandOffDone (or Stop).
	Gate Gate
	// GateWait bounds the wait for a slot; 0 means DefaultTimeout.
	GateWait time.Duration
}

// Gate is a fleet's upgrade slots (fleet.UpgradeSlots over a Consul
// semaphore).
type Gate interface {
	// Acquire waits up to bound for a slot, calling waiting with who
	// holds the slots when it starts to wait and after every round of
	// it; release gives the slot back and may be called more than once.
	Acquire(ctx context.Context, bound time.Duration, waiting func(holders string)) (release func(), err error)
}

// Upgrader hands this process's listening sockets to a new binary, in the
// manner of HAProxy's `-x` and nginx's USR2, and takes them over when an
// upgrade started this process. Exactly one upgrade runs at a time, and a
// process whose own predecessor is still draining does not start another,
// so old processes never pile up (haproxy#228, openshift/router#429).
type Upgrader struct {
	opts Options
	log  *slog.Logger
	// off says why this process cannot upgrade at all; nil if it can.
	off    error
	files  files
	parent *parent // nil: no upgrade started this process
	// parentPID is the parent's pid while it drains, for refusals.
	parentPID atomic.Int64
	watching  sync.WaitGroup // parent.watch

	serving atomic.Bool   // this process serves and told its parent so
	busy    atomic.Bool   // an upgrade is under way, or this process has handed off
	done    chan struct{} // closed when a new process has taken over
	stop    context.Context
	cancel  context.CancelFunc

	// waitingFor is what /status says while an upgrade waits for the
	// Gate; nil when it does not.
	waitingFor atomic.Pointer[string]
	// slot gives back the Gate's slot of the upgrade that succeeded;
	// stored by attempt before it gives up mu, so a Stop that follows
	// (it takes mu, then HandOffDone) always finds it.
	slot atomic.Pointer[func()]
	// attempted, when set (tests), is called right after a successful
	// attempt returns: where a Stop used to find no slot to give back.
	attempted func()

	mu sync.Mutex // guards handoff, successor and parent.ready
	// handoff is this end of the hand-off socket the next upgrade passes
	// on; made at Ready, and anew after a failed attempt (whose new
	// process may have left something in it).
	handoff *net.UnixConn
	// successor holds the names pipe of the process that took over: the
	// kernel closes it when this process exits, which is how that process
	// learns it. Held here so that nothing closes it before.
	successor *os.File
	// carriers are what each attempt carries to the new process (Carry).
	carriers map[string]func() []byte
}

// New takes the sockets a parent handed over, if an upgrade started this
// process. Where descriptors cannot be passed, or what the parent passed
// cannot be read, it returns an Upgrader that refuses upgrades and binds
// every socket itself, and says why in the log: serving matters more than
// upgrading. A new process that cannot take its sockets then fails to bind
// the admin address, and its parent keeps serving.
func New(opts Options) *Upgrader {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	u := &Upgrader{opts: opts, log: opts.Log, done: make(chan struct{})}
	if u.log == nil {
		u.log = slog.New(slog.DiscardHandler)
	}
	u.stop, u.cancel = context.WithCancel(context.Background())
	if !supported {
		u.off = errors.New("this system cannot pass listening sockets to another process")
		return u
	}
	p, inherited, err := inherit()
	if err != nil {
		u.off = fmt.Errorf("the sockets of the process that started this one: %w", err)
		u.log.Warn("upgrades are off", "err", u.off)
		return u
	}
	u.files.inherited = inherited
	if p != nil {
		u.parent = p
		u.parentPID.Store(int64(os.Getppid()))
		u.watching.Go(p.watch)
	}
	return u
}

// Binary is what an upgrade starts unless told another.
func (u *Upgrader) Binary() string { return u.opts.Child.Path }

// HasParent reports whether an upgrade started this process.
func (u *Upgrader) HasParent() bool { return u != nil && u.parent != nil }

// Listen returns the listener for a TCP addr this process inherited, or
// binds it with bind; either way the next upgrade hands it on.
func (u *Upgrader) Listen(addr string, bind func(addr string) (net.Listener, error)) (net.Listener, error) {
	if u == nil || u.off != nil {
		return bind(addr)
	}
	ln, err := u.files.listener("tcp", addr)
	if err != nil || ln != nil {
		return ln, err
	}
	if ln, err = bind(addr); err != nil {
		return nil, err
	}
	sc, ok := ln.(syscall.Conn)
	if !ok {
		_ = ln.Close()
		return nil, fmt.Errorf("listener %s: a %T cannot be handed on", addr, ln)
	}
	f, err := dupConn(sc, "listener "+addr)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("listener %s: %w", addr, err)
	}
	u.files.put(name{kindListener, "tcp", addr}, f)
	return ln, nil
}

// InheritedHandoff is this end of the hand-off socket, when an upgrade
// started this process; nil otherwise. It must be taken before Ready,
// which closes whatever was inherited and not taken.
func (u *Upgrader) InheritedHandoff() (*net.UnixConn, error) {
	if !u.HasParent() {
		return nil, nil
	}
	f := u.files.take(HandoffName)
	if f == nil {
		return nil, nil
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", HandoffName, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("%s: a %T, not a Unix socket", HandoffName, c)
	}
	return uc, nil
}

// Ready tells the parent, if any, that this process serves: the parent
// then stops accepting. Inherited sockets nobody took are closed here.
// From now on this process may itself be upgraded, once its parent has
// exited.
func (u *Upgrader) Ready() error {
	if u == nil || u.off != nil {
		return nil
	}
	u.files.closeInherited()
	u.mu.Lock()
	herr := u.newHandoffLocked()
	u.mu.Unlock()
	if herr != nil {
		u.log.Error("upgrade", "err", herr)
	}
	u.serving.Store(true)
	if u.parent == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.parent.sendReady(); err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	return nil
}

// Stop refuses further upgrades, interrupts one under way (killing its new
// process), ends the wait for the parent and closes the copies of the
// sockets kept for handing on: the process is stopping for good.
func (u *Upgrader) Stop() {
	if u == nil {
		return
	}
	u.cancel()
	u.mu.Lock() // an attempt under way ends at once now
	if u.parent != nil {
		u.parent.close()
	}
	select {
	case <-u.done: // the caller moves its connections through handoff
	default:
		if u.handoff != nil {
			_ = u.handoff.Close()
			u.handoff = nil
		}
	}
	u.mu.Unlock()
	u.watching.Wait()
	u.files.closePassed()
	u.HandOffDone()
}

// HandedOff is closed once a new process has taken over.
func (u *Upgrader) HandedOff() <-chan struct{} {
	if u == nil {
		return nil
	}
	return u.done
}

// Handoff is this end of the hand-off socket that the process which took
// over holds the other end of; the caller moves its connections through it
// and closes it. nil if there is none.
func (u *Upgrader) Handoff() *net.UnixConn {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.handoff
}

// State says whether an upgrade may start now, for /status: "ready", or
// why not.
func (u *Upgrader) State() string {
	if u != nil && u.busy.Load() {
		select {
		case <-u.done:
			return "handed over, draining"
		default:
			if w := u.waitingFor.Load(); w != nil {
				return *w
			}
			return "in progress"
		}
	}
	if err := u.refusal(); err != nil {
		return strings.TrimPrefix(err.Error(), ErrRefused.Error()+": ")
	}
	return "ready"
}

// refused is an upgrade that may not start now, and why.
func refused(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// refusal says why no upgrade may start now, busy aside; nil if one may.
func (u *Upgrader) refusal() error {
	switch {
	case u == nil || u.off != nil:
		return refused("this system cannot pass listening sockets to another process")
	case u.stop.Err() != nil:
		return refused("%v", errStopped)
	case !u.serving.Load():
		return refused("this process is not serving yet")
	case os.Getpid() == 1:
		// A container ends with its PID 1: the old process's exit would
		// take the new one with it. Containers are replaced, not upgraded.
		return refused("this process is PID 1 (a container's init), whose exit ends the container; replace the container instead")
	}
	if u.parent != nil {
		select {
		case <-u.parent.gone:
		default:
			return refused("the process this one replaced (pid %d) is still draining", u.parentPID.Load())
		}
	}
	return nil
}

// begin claims the one upgrade slot, or says why there is none.
func (u *Upgrader) begin() error {
	if err := u.refusal(); err != nil {
		return err
	}
	if !u.busy.CompareAndSwap(false, true) {
		select {
		case <-u.done:
			return refused("this process has already handed over and is draining")
		default:
			return refused("an upgrade is already in progress")
		}
	}
	return nil
}

// Upgrade starts binary ("" for Options.Child.Path) with the Child's
// arguments, environment and directory and this process's sockets, and
// waits until it serves or fails. via names who asked, for the log. On
// success HandedOff is closed and the caller stops accepting; on failure
// nothing changed, and nothing of the attempt is left open. An error
// wrapping ErrRefused means no attempt was made.
func (u *Upgrader) Upgrade(binary, via string) error {
	if u == nil {
		return u.refusal()
	}
	if err := u.begin(); err != nil {
		u.log.Warn("upgrade refused", "via", via, "err", err)
		return err
	}
	c := u.opts.Child
	if binary != "" {
		c.Path = binary
	}
	log := u.log.With("via", via, "binary", c.Path)
	release, err := u.takeSlot(log)
	if err != nil {
		u.busy.Store(false)
		log.Warn("upgrade refused", "err", err)
		return err
	}
	log.Info("upgrade: starting the new process")
	begun := time.Now()
	if err := u.attempt(c, release); err != nil {
		release()
		u.busy.Store(false)
		err = fmt.Errorf("upgrade to %s failed, this process keeps serving: %w", c.Path, err)
		log.Error("upgrade failed", "err", err)
		return err
	}
	if u.attempted != nil {
		u.attempted()
	}
	log.Info("upgrade: the new process serves; handing over", "took", time.Since(begun).String())
	// This process's copies are no longer needed: the new process has
	// its own, and the listeners themselves are the caller's to close.
	u.files.closePassed()
	close(u.done)
	return nil
}

// takeSlot waits for a slot of the Gate, if there is one, saying so in
// the log and in State at every round; its error is a refusal.
func (u *Upgrader) takeSlot(log *slog.Logger) (func(), error) {
	if u.opts.Gate == nil {
		return func() {}, nil
	}
	bound := u.opts.GateWait
	if bound <= 0 {
		bound = DefaultTimeout
	}
	begun := time.Now()
	defer u.waitingFor.Store(nil)
	release, err := u.opts.Gate.Acquire(u.stop, bound, func(holders string) {
		msg := fmt.Sprintf("waiting for a fleet upgrade slot (%s of %s): held by %s", time.Since(begun).Round(time.Second), bound, holders)
		u.waitingFor.Store(&msg)
		log.Info("upgrade: "+msg, "waited", time.Since(begun).String(), "bound", bound.String())
	})
	if err != nil {
		return nil, refused("%v; this process keeps serving", err)
	}
	if time.Since(begun) > time.Second {
		log.Info("upgrade: fleet upgrade slot taken", "waited", time.Since(begun).String())
	}
	return release, nil
}

// Gate returns Options.Gate (nil without one, or on a nil Upgrader), for
// its owner's metrics.
func (u *Upgrader) Gate() Gate {
	if u == nil {
		return nil
	}
	return u.opts.Gate
}

// HandOffDone gives back the fleet's upgrade slot (Options.Gate) of the
// upgrade that succeeded, once this process has handed its connections
// over: until then the fleet counts this edge as handing off.
func (u *Upgrader) HandOffDone() {
	if u == nil {
		return
	}
	if release := u.slot.Swap(nil); release != nil {
		u.log.Info("upgrade: fleet upgrade slot given back")
		(*release)()
	}
}

// attempt runs one upgrade, the hand-off socket's far end passed with the
// listeners. On success it stores release as the slot to give back before
// it unlocks mu: a Stop waiting for mu then gives it back, where storing it
// after attempt returned left it held until its Consul session expired.
func (u *Upgrader) attempt(c Child, release func()) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.handoff == nil {
		if err := u.newHandoffLocked(); err != nil {
			return err
		}
	}
	var s *started
	carried := u.putCarriedLocked()
	err := u.files.withPassed(func(names []name, passed []*os.File) error {
		var err error
		s, err = start(c, names, passed)
		return err
	})
	// The new process has its copies (or failed): this process's go now.
	u.files.drop(carried)
	if err == nil {
		err = s.await(u.stop, u.opts.Timeout)
	}
	if err != nil {
		// The failed process may have read or written the hand-off
		// socket: the next attempt gets a fresh pair.
		if herr := u.newHandoffLocked(); herr != nil {
			u.log.Error("upgrade", "err", herr)
		}
		return err
	}
	u.successor = s.namesW
	u.slot.Store(&release)
	return nil
}

// newHandoffLocked makes the hand-off socket pair for the next upgrade:
// the new process's end replaces the previous one among the passed files
// (which closes it), this end replaces (and closes) the previous one.
func (u *Upgrader) newHandoffLocked() error {
	if u.stop.Err() != nil {
		return nil // Stop closes what there is; nothing new after it
	}
	own, theirs, err := handoffPair()
	if err != nil {
		if u.handoff != nil {
			_ = u.handoff.Close()
			u.handoff = nil
		}
		return fmt.Errorf("%s socket: %w", HandoffName, err)
	}
	u.files.put(name{kindFile, HandoffName}, theirs)
	if u.handoff != nil {
		_ = u.handoff.Close()
	}
	u.handoff = own
	return nil
}

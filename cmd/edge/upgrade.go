package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/edgelb/edge/internal/admin"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

// handoffName names the inherited socket over which live connections move
// from the old process to the new one.
const handoffName = "edge-handoff"

// upgrader hands this process's listening sockets to a new binary, in the
// manner of HAProxy's `-x` and nginx's USR2: the new process inherits them
// over SCM_RIGHTS (tableflip), so no connection attempt is refused and the
// accept queues survive, and the old one stops accepting only once the new
// one serves. Exactly one upgrade runs at a time, and a process whose own
// predecessor is still draining does not start another, so old processes
// never pile up (haproxy#228, openshift/router#429).
type upgrader struct {
	tf     *tableflip.Upgrader // nil where descriptors cannot be passed (Windows)
	binary string              // what an upgrade starts unless told another
	notify string              // NOTIFY_SOCKET for the new process; "" without a manager
	log    *slog.Logger

	serving atomic.Bool // this process serves and told its parent so
	busy    atomic.Bool // an upgrade is under way, or this process has handed off
	parent  chan struct{}
	// parentOnce closes parent: when the process that started this one
	// has exited, or at once when there is none.
	parentOnce sync.Once
	done       chan struct{} // closed when a new process has taken over
	// handoff is this end of the hand-off socket the next upgrade passes
	// on; made when this process serves, and anew after a failed attempt
	// (whose new process may have left something in it).
	handoff *net.UnixConn
	pid     atomic.Int64 // the parent's pid while it drains, for refusals

	metrics *upgradeMetrics
}

// newUpgrader takes the sockets a parent handed over, if any; timeout
// bounds how long a new process may take to become ready.
func newUpgrader(timeout time.Duration, notifySocket string, log *slog.Logger) *upgrader {
	u := &upgrader{binary: selfBinary(), notify: notifySocket, log: log, parent: make(chan struct{}), done: make(chan struct{})}
	tf, err := tableflip.New(tableflip.Options{UpgradeTimeout: timeout})
	if err != nil {
		// Serving matters more than upgrading: without tableflip (not on
		// this system, or no working directory to start a new process in)
		// edge binds its own sockets and refuses upgrades. A new process
		// that cannot take its sockets then fails to bind the admin
		// address, and its parent keeps serving.
		if !errors.Is(err, tableflip.ErrNotSupported) {
			log.Warn("upgrades are off", "err", err)
		}
		u.closeParent()
		return u
	}
	u.tf = tf
	if !tf.HasParent() {
		u.closeParent()
	} else {
		u.pid.Store(int64(os.Getppid()))
	}
	return u
}

// selfBinary is the binary this process was started as, made absolute now,
// while the working directory is the one it was started in. It is the path
// (argv[0], found on PATH if bare), not the file: a binary replaced at that
// path (install, mv, a package upgrade) or a symlink pointed at another
// release is what the next upgrade runs, where os.Executable would name the
// symlink's old target. os.Executable is the fallback when argv[0] names
// nothing.
func selfBinary() string {
	arg0 := os.Args[0]
	if !strings.Contains(arg0, string(filepath.Separator)) {
		if p, err := exec.LookPath(arg0); err == nil {
			arg0 = p
		}
	}
	if abs, err := filepath.Abs(arg0); err == nil {
		if _, err := os.Stat(abs); err == nil {
			return abs
		}
	}
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return arg0
}

func (u *upgrader) closeParent() { u.parentOnce.Do(func() { close(u.parent) }) }

// listen returns the listener for addr this process inherited, or binds
// it with bind; either way the next upgrade hands it on.
func (u *upgrader) listen(addr string, bind func(addr string) (net.Listener, error)) (net.Listener, error) {
	if u == nil || u.tf == nil {
		return bind(addr)
	}
	ln, err := u.tf.Listener("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("inherited listener %s: %w", addr, err)
	}
	if ln != nil {
		return ln, nil
	}
	// Bound here rather than through tableflip's callback, whose error
	// would lose bind's (and its errno) to a string.
	if ln, err = bind(addr); err != nil {
		return nil, err
	}
	tl, ok := ln.(tableflip.Listener)
	if !ok {
		_ = ln.Close()
		return nil, fmt.Errorf("listener %s: a %T cannot be handed on", addr, ln)
	}
	if err := u.tf.AddListener("tcp", addr, tl); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("listener %s: %w", addr, err)
	}
	return ln, nil
}

// hasParent reports whether an upgrade started this process.
func (u *upgrader) hasParent() bool { return u != nil && u.tf != nil && u.tf.HasParent() }

// inheritedHandoff is this end of the hand-off socket, when an upgrade
// started this process; nil otherwise. It must be taken before ready, which
// closes whatever was inherited and not taken.
func (u *upgrader) inheritedHandoff() (*net.UnixConn, error) {
	if !u.hasParent() {
		return nil, nil
	}
	f, err := u.tf.File(handoffName)
	if err != nil || f == nil {
		return nil, err
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", handoffName, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("%s: a %T, not a Unix socket", handoffName, c)
	}
	return uc, nil
}

// ready tells the parent, if any, that this process serves: the parent
// then stops accepting. Inherited sockets the file no longer names are
// closed here. From now on this process may itself be upgraded.
func (u *upgrader) ready(ctx context.Context) error {
	if u == nil || u.tf == nil {
		return nil
	}
	err := u.tf.Ready()
	if herr := u.newHandoff(); herr != nil {
		u.log.Error("upgrade", "err", herr)
	}
	if u.tf.HasParent() {
		// The new socket took the name of the inherited one, whose copy
		// tableflip kept and has now let go of without closing it; its
		// finalizer closes it, after this collection rather than some
		// later one.
		runtime.GC()
	}
	u.serving.Store(true)
	if u.tf.HasParent() {
		go func() {
			// Owned by ctx: the wait ends with the parent or with serve.
			_ = u.tf.WaitForParent(ctx)
			u.pid.Store(0)
			u.closeParent()
		}()
	}
	if err != nil {
		return fmt.Errorf("upgrade: tell the parent: %w", err)
	}
	return nil
}

// stop refuses further upgrades, interrupts one under way (killing its new
// process) and releases the copies of the listening sockets kept for
// handing on: the process is stopping for good.
func (u *upgrader) stop() {
	if u != nil && u.tf != nil {
		u.tf.Stop()
	}
}

// handedOff is closed once a new process has taken over.
func (u *upgrader) handedOff() <-chan struct{} {
	if u == nil {
		return nil
	}
	return u.done
}

// state says whether an upgrade may start now, for /status: "ready", or
// why not.
func (u *upgrader) state() string {
	if u.busy.Load() {
		select {
		case <-u.done:
			return "handed over, draining"
		default:
			return "in progress"
		}
	}
	if err := u.refusal(); err != nil {
		return strings.TrimPrefix(err.Error(), "upgrade refused: ")
	}
	return "ready"
}

// upgradeError is a failed or refused upgrade, with the reason.
type upgradeError struct {
	refused bool
	err     error
}

func (e *upgradeError) Error() string { return e.err.Error() }
func (e *upgradeError) Unwrap() error { return e.err }

// refused is an upgrade that may not start now, and why.
func refused(format string, args ...any) error {
	return &upgradeError{refused: true, err: fmt.Errorf("upgrade refused: "+format, args...)}
}

// refusal says why no upgrade may start now, busy aside; nil if one may.
func (u *upgrader) refusal() error {
	switch {
	case u == nil || u.tf == nil:
		return refused("this system cannot pass listening sockets to another process")
	case !u.serving.Load():
		return refused("this process is not serving yet")
	case os.Getpid() == 1:
		// A container ends with its PID 1: the old process's exit would
		// take the new one with it. Containers are replaced, not upgraded.
		return refused("this process is PID 1 (a container's init), whose exit ends the container; replace the container instead")
	}
	select {
	case <-u.parent:
		return nil
	default:
		return refused("the process this one replaced (pid %d) is still draining", u.pid.Load())
	}
}

// begin claims the one upgrade slot, or says why there is none.
func (u *upgrader) begin() error {
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

// upgrade starts binary ("" for the one this process was started as) with
// this process's arguments and sockets, and waits until it serves or
// fails. On success the caller's serve loop sees handedOff and stops
// accepting; on failure nothing changed.
func (u *upgrader) upgrade(binary, via string) error {
	if err := u.begin(); err != nil {
		u.count("refused")
		u.log.Warn("upgrade refused", "via", via, "err", err)
		return err
	}
	if binary == "" {
		binary = u.binary
	}
	log := u.log.With("via", via, "binary", binary)
	log.Info("upgrade: starting the new process")
	start := time.Now()
	if err := u.attempt(binary); err != nil {
		// tableflip leaves the descriptors of a failed attempt (the ready
		// and names pipes, its copy of the hand-off socket) to their
		// finalizers; collect now, so failed attempts leave none behind.
		runtime.GC()
		u.busy.Store(false)
		u.count("failed")
		err = &upgradeError{err: fmt.Errorf("upgrade to %s failed, this process keeps serving: %w", binary, err)}
		log.Error("upgrade failed", "err", err)
		return err
	}
	u.count("ok")
	log.Info("upgrade: the new process serves; handing over", "took", time.Since(start).String())
	close(u.done)
	return nil
}

// newHandoff makes the hand-off socket pair for the next upgrade: the new
// process's end is registered with tableflip as an extra inherited file,
// replacing the previous one, this end is kept.
func (u *upgrader) newHandoff() error {
	own, theirs, err := handoffPair()
	if err != nil {
		return fmt.Errorf("%s socket: %w", handoffName, err)
	}
	err = u.tf.AddFile(handoffName, theirs)
	_ = theirs.Close() // tableflip keeps its own copy
	if err != nil {
		_ = own.Close()
		return fmt.Errorf("%s socket: %w", handoffName, err)
	}
	if u.handoff != nil {
		_ = u.handoff.Close()
	}
	u.handoff = own
	return nil
}

// attempt runs one tableflip upgrade, the hand-off socket's far end passed
// with the listeners.
func (u *upgrader) attempt(binary string) error {
	if u.handoff == nil {
		if err := u.newHandoff(); err != nil {
			return err
		}
	}
	// tableflip starts os.Args[0] with os.Args[1:] (so the same flags and
	// configuration file) from the directory this process started in.
	arg0 := os.Args[0]
	os.Args[0] = binary
	if u.notify != "" {
		// The new process tells the manager it is the main process now;
		// edge keeps NOTIFY_SOCKET out of its environment otherwise.
		_ = os.Setenv("NOTIFY_SOCKET", u.notify)
	}
	err := u.tf.Upgrade()
	if u.notify != "" {
		_ = os.Unsetenv("NOTIFY_SOCKET")
	}
	os.Args[0] = arg0
	if err != nil {
		if herr := u.newHandoff(); herr != nil {
			u.log.Error("upgrade", "err", herr)
			_ = u.handoff.Close()
			u.handoff = nil
		}
		return err
	}
	return nil
}

// count adds one upgrade with its result to edge_upgrades_total.
func (u *upgrader) count(result string) {
	if u.metrics != nil {
		u.metrics.upgrades.WithLabelValues(result).Inc()
	}
}

// upgradeMetrics count upgrades and what became of the connections the
// old process held.
type upgradeMetrics struct {
	upgrades *prometheus.CounterVec
	conns    *prometheus.CounterVec
}

// newUpgradeMetrics registers the upgrade series on reg, every label at 0.
func newUpgradeMetrics(reg prometheus.Registerer) *upgradeMetrics {
	m := &upgradeMetrics{
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_upgrades_total", Help: "Hand-offs to a new binary, by result: ok, failed (the new process did not start or become ready; this one keeps serving), refused (one was under way, or this process may not start one)."}, []string{"result"}),
		conns:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_upgrade_connections_total", Help: "Live WebSockets of the old process at an upgrade: moved to the new process, or closed there (1012, or on their own before theirs was due)."}, []string{"outcome"}),
	}
	reg.MustRegister(m.upgrades, m.conns)
	for _, r := range []string{"ok", "failed", "refused"} {
		m.upgrades.WithLabelValues(r)
	}
	for _, o := range []string{"moved", "closed"} {
		m.conns.WithLabelValues(o)
	}
	return m
}

// handOver is the old process's end of a successful upgrade: the admin
// listener and every public listener stop accepting (the new process holds
// the same sockets, so their queues are its to accept), the HTTP phase of
// accepted connections finishes (so none of them gets the drain's 503),
// then live WebSockets move to the new process (proxy.Server.Handoff);
// those that cannot move get a 1012 spread over drain.window, and a
// hand-off that fails leaves the rest to a drain (1001). Everything is
// bounded by drain.timeout.
func (e *edge) handOver(stopAdmin context.CancelFunc) {
	d := e.config().Drain
	e.drainFrom.Store(int64(e.proxy.Active()))
	e.drainStart.Store(time.Now().UnixNano())
	stopAdmin()
	e.log.Info("handed over: draining", "connections", e.proxy.Active(), "window", d.Window.String(), "timeout", d.Timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout.Std())
	defer cancel()
	e.stopAccepting(ctx)
	e.shutdownListeners(ctx)
	conn := e.up.handoff
	defer conn.Close()
	if conn == nil {
		e.proxy.Drain(ctx, d.Window.Std())
		_ = e.proxy.Close()
		e.log.Info("drained", "left", e.proxy.Active())
		return
	}
	moved, closed, err := e.proxy.Handoff(ctx, conn, d.Window.Std())
	e.up.metrics.conns.WithLabelValues("moved").Add(float64(moved))
	e.up.metrics.conns.WithLabelValues("closed").Add(float64(closed))
	if err != nil {
		e.log.Error("connection hand-off", "moved", moved, "closed", closed, "err", err)
	}
	if e.proxy.Active() > 0 {
		// Whatever the hand-off left (a failed one) drains as a stop
		// does, within what is left of drain.timeout.
		e.proxy.Drain(ctx, d.Window.Std())
	}
	_ = e.proxy.Close()
	e.log.Info("drained", "moved", moved, "closed", closed, "left", e.proxy.Active())
}

// stopAccepting closes every public listener and waits, until ctx ends,
// for the HTTP phase of the connections already accepted. Shutdown alone
// would drop a request read after it began (net/http closes such a
// connection unanswered): keep-alives go off first, so each answer closes
// its connection, and Shutdown comes once only WebSockets are left.
func (e *edge) stopAccepting(ctx context.Context) {
	for _, l := range e.listeners {
		l.srv.SetKeepAlivesEnabled(false)
		_ = l.ln.Close()
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for e.httpPhase() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// httpPhase is how many client sockets are not (yet) live WebSockets:
// handshakes, requests, upgrades being set up.
func (e *edge) httpPhase() int64 {
	var n int64
	for _, l := range e.listeners {
		n += l.conns.Open()
	}
	return n - int64(e.proxy.Active())
}

// shutdownListeners stops every public listener and waits for the HTTP
// phase of their connections, until ctx ends.
func (e *edge) shutdownListeners(ctx context.Context) {
	var wg sync.WaitGroup
	for _, l := range e.listeners {
		wg.Go(func() { _ = l.srv.Shutdown(ctx) })
	}
	wg.Wait()
}

// shutdownAndDrain is drain's second half: listeners stop while
// WebSockets get 1001 spread over window; what is left at ctx's end is
// closed. http.Server.Shutdown does not know hijacked connections
// (traefik#3630), hence proxy.Drain beside it.
func (e *edge) shutdownAndDrain(ctx context.Context, window time.Duration) {
	done := make(chan struct{})
	go func() { e.shutdownListeners(ctx); close(done) }()
	e.proxy.Drain(ctx, window)
	<-done
	_ = e.proxy.Close()
}

// adopt runs the new process's end of the connection hand-off
// (proxy.Server.Adopt) until the old process closes its end.
func (e *edge) adopt(ctx context.Context, conn *net.UnixConn) error {
	defer conn.Close()
	n, err := e.proxy.Adopt(ctx, conn)
	e.log.Info("adopted connections from the old process", "connections", n)
	if err != nil && !errors.Is(err, context.Canceled) {
		e.log.Error("connection hand-off", "adopted", n, "err", err)
	}
	return nil
}

// upgradeRequest is the optional body of POST /api/v1/upgrade.
type upgradeRequest struct {
	// Binary is an absolute path; default, the binary edge was started as.
	Binary string `json:"binary"`
}

// upgradeDoc is the answer to a successful upgrade.
type upgradeDoc struct {
	Result string `json:"result"`
	Binary string `json:"binary"`
	// OldPID is the process that answered and now drains.
	OldPID int `json:"old_pid"`
}

// upgradeEndpoints are POST /api/v1/upgrade and its short name, for hands
// at a terminal, POST /api/upgrade.
func (e *edge) upgradeEndpoints() []admin.Endpoint {
	return []admin.Endpoint{
		{Method: "POST", Path: "/api/v1/upgrade", Access: admin.Write, Handle: e.apiUpgrade},
		{Method: "POST", Path: "/api/upgrade", Access: admin.Write, Handle: e.apiUpgrade},
	}
}

// apiUpgrade is POST /api/v1/upgrade: 200 once the new process serves,
// 409 when an upgrade is under way or this process may not start one, 500
// with the reason when the new process failed.
func (e *edge) apiUpgrade(r *http.Request) (any, error) {
	var body upgradeRequest
	if err := admin.DecodeBody(r, &body); err != nil {
		return nil, err
	}
	if body.Binary != "" {
		if !filepath.IsAbs(body.Binary) {
			return nil, admin.Errorf(http.StatusBadRequest, "binary %q: want an absolute path", body.Binary)
		}
	}
	err := e.up.upgrade(body.Binary, "api")
	var ue *upgradeError
	switch {
	case errors.As(err, &ue) && ue.refused:
		return nil, admin.Errorf(http.StatusConflict, "%v", err)
	case err != nil:
		return nil, admin.Errorf(http.StatusInternalServerError, "%v", err)
	}
	bin := body.Binary
	if bin == "" {
		bin = e.up.binary
	}
	return upgradeDoc{Result: "ok", Binary: bin, OldPID: os.Getpid()}, nil
}

// becomeReady ends the start, /readyz being true already: the service
// manager hears READY=1 (and MAINPID= from a process an upgrade started, which
// becomes the unit's main process), and a parent waiting on this process
// is told, which makes it stop accepting. An upgraded process then adopts
// the connections its parent hands over.
func (e *edge) becomeReady(ctx context.Context, g *errgroup.Group) {
	handoff, err := e.up.inheritedHandoff()
	if err != nil {
		e.log.Error("connection hand-off socket", "err", err)
	}
	e.log.Info("edge started", "version", versionString(), "pid", os.Getpid(), "parent", e.up.hasParent(), "listeners", len(e.listeners), "admin", e.admin.Addr().String(), "metrics", e.admin.MetricsAddress())
	if e.up.hasParent() {
		e.sdNotify(e.notify.readyAsMain(os.Getpid(), "serving; upgraded from pid "+strconv.Itoa(os.Getppid())))
	} else {
		e.sdNotify(e.notify.ready("serving"))
	}
	if err := e.up.ready(ctx); err != nil {
		e.log.Error("upgrade", "err", err)
	}
	if handoff != nil {
		g.Go(func() error { return e.adopt(ctx, handoff) })
	}
	// A SIGUSR2 that came while this process was starting is refused, not
	// kept for later.
	select {
	case <-e.usr2:
		e.log.Warn("upgrade refused", "via", "SIGUSR2", "err", "the signal came before this process was serving")
		e.up.count("refused")
	default:
	}
}

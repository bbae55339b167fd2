package main

// The process helpers follow bench/cmd/benchrun/procs.go (a main package,
// which cannot be imported), without the core pinning: the fleet's processes
// share both cores.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/edgelb/edge/bench/internal/wire"
)

// proc is one child process, started in its own process group so that a
// terminal's Ctrl-C reaches only the orchestrator, which then stops the
// children in order.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// procs owns every child the orchestrator started, so that an interrupted
// run still stops all of them.
type procs struct {
	mu   sync.Mutex
	live map[*proc]struct{}
}

func newProcs() *procs { return &procs{live: make(map[*proc]struct{})} }

// start runs argv with its output appended to logPath. stdin and stdout, when
// not nil, are handed to the child as they are (os pipes, so that no copying
// goroutine outlives the child).
func (ps *procs) start(name string, env []string, logPath string, stdin, stdout *os.File, argv ...string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd.Stderr = logf
	cmd.Stdout = logf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	// Pdeathsig stops the child should the orchestrator die without
	// running its cleanup (SIGKILL, a crash).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s (%v): %w", name, argv, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	ps.mu.Lock()
	ps.live[p] = struct{}{}
	ps.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		ps.mu.Lock()
		delete(ps.live, p)
		ps.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

// stopAll stops every live child.
func (ps *procs) stopAll(grace time.Duration) {
	ps.mu.Lock()
	all := make([]*proc, 0, len(ps.live))
	for p := range ps.live {
		all = append(all, p)
	}
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.stop(grace) })
	}
	wg.Wait()
}

// waitListening polls until addr accepts TCP connections or the process exits.
func waitListening(ctx context.Context, p *proc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before listening on %s: %v", p.name, addr, p.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %v: %w", p.name, addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// gen is one load-generator process and the events it reports.
type gen struct {
	p      *proc
	stdin  io.WriteCloser
	events chan wire.Event
}

func (ps *procs) startGen(name, logPath string, argv ...string) (*gen, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe for %s: %w", name, err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return nil, fmt.Errorf("pipe for %s: %w", name, err)
	}
	p, err := ps.start(name, nil, logPath, inR, outW, argv...)
	// The child holds its own copies of these ends now.
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = outR.Close()
		_ = inW.Close()
		return nil, err
	}
	g := &gen{p: p, stdin: inW, events: make(chan wire.Event, 64)}
	go func() {
		defer close(g.events)
		defer func() { _ = outR.Close() }()
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var e wire.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				continue
			}
			g.events <- e
		}
	}()
	return g, nil
}

func (g *gen) send(cmd string) error {
	if _, err := io.WriteString(g.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("send %q to %s: %w", cmd, g.p.name, err)
	}
	return nil
}

// next waits for the next event of kind want.
func (g *gen) next(ctx context.Context, want string) (wire.Event, error) {
	for {
		select {
		case <-ctx.Done():
			return wire.Event{}, fmt.Errorf("%s: no %q event: %w", g.p.name, want, context.Cause(ctx))
		case e, ok := <-g.events:
			if !ok {
				return wire.Event{}, fmt.Errorf("%s exited before %q: %v", g.p.name, want, g.p.err)
			}
			if e.Event == wire.EventFatal {
				return wire.Event{}, fmt.Errorf("%s: %s", g.p.name, e.Error)
			}
			if e.Event == want {
				return e, nil
			}
		}
	}
}

// finish closes the generator's input (its signal to close its connections
// and quit) and waits.
func (g *gen) finish(timeout time.Duration) {
	_ = g.stdin.Close()
	select {
	case <-g.p.done:
	case <-time.After(timeout):
		g.p.stop(time.Second)
	}
}

// gens is a set of generator processes driven together.
type gens []*gen

// all waits for one event of kind want from every generator, in parallel,
// so one that failed is reported at once rather than after the others.
func (gs gens) all(ctx context.Context, want string) ([]wire.Event, error) {
	out := make([]wire.Event, len(gs))
	errs := make([]error, len(gs))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() {
			out[i], errs[i] = g.next(ctx, want)
			if errs[i] != nil {
				cancel(errs[i])
			}
		})
	}
	wg.Wait()
	// The first failure cancelled the others; it is the one to report.
	return out, context.Cause(ctx)
}

func (gs gens) send(cmd string) error {
	var errs []error
	for _, g := range gs {
		errs = append(errs, g.send(cmd))
	}
	return errors.Join(errs...)
}

func (gs gens) finish(timeout time.Duration) {
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() { g.finish(timeout) })
	}
	wg.Wait()
}

package proc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Proc is one child process, started in its own process group: stopping the
// group stops a proxy's workers with it (nginx runs a master and a worker),
// and a terminal's Ctrl-C reaches only the orchestrator, which then stops the
// children in its own order.
type Proc struct {
	// Name names the process in errors and reports.
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Group owns every child the orchestrator started, so that an interrupted
// run still stops all of them.
type Group struct {
	mu   sync.Mutex
	live map[*Proc]struct{}
}

// NewGroup returns an empty group.
func NewGroup() *Group { return &Group{live: make(map[*Proc]struct{})} }

// Pin returns argv run by taskset on core cpu only, to pass to Start: the
// benchmark places the proxy and the load on cores of their own.
func Pin(cpu int, argv ...string) []string {
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// Start runs argv with env added to the orchestrator's environment and its
// output appended to logPath. stdin and stdout, when not nil, are handed to
// the child as they are (os pipes, so that no copying goroutine outlives the
// child).
func (g *Group) Start(name string, env []string, logPath string, stdin, stdout *os.File, argv ...string) (*Proc, error) {
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
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	g.mu.Lock()
	g.live[p] = struct{}{}
	g.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		g.mu.Lock()
		delete(g.live, p)
		g.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id, which is also its process group's.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed once the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// CPU is the user and system time the process used, once it has ended
// (from its rusage: /proc no longer has it), and 0 while it runs.
func (p *Proc) CPU() time.Duration {
	if !p.Exited() || p.cmd.ProcessState == nil {
		return 0
	}
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}

// Err is how the process ended (nil for a zero exit status), and nil while
// it runs.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and
// returns once the process has ended.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.done
	}
}

// StopAll stops every live child at once, each with grace.
func (g *Group) StopAll(grace time.Duration) {
	g.mu.Lock()
	all := make([]*Proc, 0, len(g.live))
	for p := range g.live {
		all = append(all, p)
	}
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.Stop(grace) })
	}
	wg.Wait()
}

// WaitListening polls until addr accepts TCP connections, and fails early
// when p exits first (a configuration error shows at once, not after
// timeout).
func WaitListening(ctx context.Context, p *Proc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited before listening on %s: %v", p.Name, addr, p.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %v: %w", p.Name, addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

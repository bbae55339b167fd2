package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Child is the process an upgrade starts: every part given, nothing taken
// from this process's os.Args or environment.
type Child struct {
	// Path is the binary, an absolute path.
	Path string
	// Args are its arguments after argv[0] (which is Path).
	Args []string
	// Env is its environment; the upgrade adds only its own variable.
	Env []string
	// Dir is its working directory.
	Dir string
}

// parent is the new process's side of the wire: the pipe it says it is
// ready on, and the end of the one whose end of file means the old
// process has exited.
type parent struct {
	ready *os.File // descriptor 3; nil once written
	names *os.File // descriptor 4, read to its end by watch
	gone  chan struct{}
}

// inherit takes what a parent passed, if one started this process: the
// descriptors and their names. Without sentinelEnv it returns nil and no
// files.
func inherit() (*parent, map[name]*os.File, error) {
	if os.Getenv(sentinelEnv) == "" {
		return nil, nil, nil
	}
	// Not passed on to anything this process starts but through Child.Env.
	_ = os.Unsetenv(sentinelEnv)
	ready, err := inheritFD(readyFD, "upgrade-ready")
	if err != nil {
		return nil, nil, err
	}
	names, err := inheritFD(namesFD, "upgrade-names")
	if err != nil {
		_ = ready.Close()
		return nil, nil, err
	}
	p := &parent{ready: ready, names: names, gone: make(chan struct{})}
	list, err := decodeNames(names)
	if err != nil {
		p.close()
		return nil, nil, err
	}
	out := make(map[name]*os.File, len(list))
	for i, n := range list {
		f, err := inheritFD(firstFD+i, n.String())
		if err != nil {
			p.close()
			for _, f := range out {
				_ = f.Close()
			}
			return nil, nil, err
		}
		out[n] = f
	}
	return p, out, nil
}

// watch reads the names pipe to its end, which comes when the parent has
// exited (the kernel closes its end), or until close interrupts it; then
// gone is closed. It is the goroutine of New, owned by the Upgrader.
func (p *parent) watch() {
	defer close(p.gone)
	// Nothing else comes on this pipe: data is a parent that is not edge's.
	_, _ = io.Copy(io.Discard, p.names)
}

// sendReady tells the parent this process serves, once.
func (p *parent) sendReady() error {
	if p.ready == nil {
		return nil
	}
	_, err := p.ready.Write([]byte{notifyReady})
	cerr := p.ready.Close()
	p.ready = nil
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tell the parent: %w", err)
	}
	return nil
}

// close interrupts watch and closes both pipes.
func (p *parent) close() {
	_ = p.names.SetReadDeadline(time.Now())
	if p.ready != nil {
		_ = p.ready.Close()
		p.ready = nil
	}
}

// childEnv is env without any sentinel of its own, plus this process's.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, sentinelEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, sentinelEnv+"=yes")
}

// started is a new process until it is ready or has failed.
type started struct {
	cmd    *exec.Cmd
	readyR *os.File // this end of descriptor 3
	namesW *os.File // this end of descriptor 4: kept open while this process lives
}

// start runs c with the passed descriptors behind the two pipes. On error
// nothing is left open or running.
func start(c Child, names []name, passed []*os.File) (*started, error) {
	list, err := encodeNames(names)
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	namesR, namesW, err := os.Pipe()
	if err != nil {
		_ = readyR.Close()
		_ = readyW.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	// Written before the new process starts, so its exit cannot cut the
	// write short: a pipe holds 64 KiB on Linux (at least 4 KiB anywhere)
	// and edge's names are a few hundred bytes. The deadline is for a list
	// that does not fit.
	_ = namesW.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := namesW.Write(list); err != nil {
		for _, f := range []*os.File{readyR, readyW, namesR, namesW} {
			_ = f.Close()
		}
		return nil, fmt.Errorf("names of the passed descriptors (%d bytes): %w", len(list), err)
	}
	_ = namesW.SetWriteDeadline(time.Time{})
	cmd := &exec.Cmd{
		Path:   c.Path,
		Args:   append([]string{c.Path}, c.Args...),
		Env:    childEnv(c.Env),
		Dir:    c.Dir,
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		// Descriptors 3, 4, then 5 and up, as the new process expects.
		ExtraFiles: append([]*os.File{readyW, namesR}, passed...),
	}
	err = cmd.Start()
	// The new process's ends are its own now (or nobody's).
	_ = readyW.Close()
	_ = namesR.Close()
	if err != nil {
		_ = readyR.Close()
		_ = namesW.Close()
		return nil, fmt.Errorf("start %s: %w", c.Path, err)
	}
	return &started{cmd: cmd, readyR: readyR, namesW: namesW}, nil
}

// errNotReady is a new process that closed its end of the ready pipe
// without saying it serves: it exited, or is not edge.
var errNotReady = errors.New("exited before it was ready")

// await waits until the new process says it serves, exits, takes longer
// than timeout, or stop ends. On error the process is killed and reaped.
func (s *started) await(stop context.Context, timeout time.Duration) error {
	_ = s.readyR.SetReadDeadline(time.Now().Add(timeout))
	interrupt := context.AfterFunc(stop, func() { _ = s.readyR.SetReadDeadline(time.Now()) })
	var b [1]byte
	n, err := s.readyR.Read(b[:])
	interrupt()
	_ = s.readyR.Close()
	pid := s.cmd.Process.Pid
	switch {
	case n == 1 && b[0] == notifyReady:
		// Once it serves the new process is on its own: no goroutine of
		// this one waits for it, and the kernel closes namesW when this
		// process exits, which is how the new one learns it.
		_ = s.cmd.Process.Release()
		return nil
	case stop.Err() != nil:
		err = errStopped
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("timed out: not ready within %s", timeout)
	case n == 1:
		err = fmt.Errorf("wrote %#x, not ready: not an edge", b[0])
	default:
		err = errNotReady
	}
	if state := s.fail(); state != "" && errors.Is(err, errNotReady) {
		return fmt.Errorf("new process %d %w: %s", pid, err, state)
	}
	return fmt.Errorf("new process %d: %w", pid, err)
}

// fail kills and reaps the new process and closes both pipes; it returns
// how the process ended.
func (s *started) fail() string {
	_ = s.cmd.Process.Kill()
	err := s.cmd.Wait()
	_ = s.readyR.Close()
	_ = s.namesW.Close()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return ""
}

package proc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/edgelb/edge/bench/internal/wire"
)

// Gen is one load-generator process (bench/loadgen) and the events it
// reports, one wire.Event per line of its standard output.
type Gen struct {
	// Proc is the generator's process.
	Proc   *Proc
	stdin  io.WriteCloser
	events chan wire.Event
}

// StartGen starts argv, a generator's command line, as Start does, with its
// standard input and output connected to the returned Gen; its standard error
// goes to logPath.
func (g *Group) StartGen(name, logPath string, argv ...string) (*Gen, error) {
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
	p, err := g.Start(name, nil, logPath, inR, outW, argv...)
	// The child holds its own copies of these ends now.
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = outR.Close()
		_ = inW.Close()
		return nil, err
	}
	gen := &Gen{Proc: p, stdin: inW, events: make(chan wire.Event, 64)}
	go func() {
		defer close(gen.events)
		defer func() { _ = outR.Close() }()
		sc := bufio.NewScanner(outR)
		// A result event carries a latency histogram, which can exceed the
		// scanner's default 64 KiB line.
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var e wire.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				continue
			}
			gen.events <- e
		}
	}()
	return gen, nil
}

// Send writes one command line (wire.CmdStart, ...) to the generator.
func (g *Gen) Send(cmd string) error {
	if _, err := io.WriteString(g.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("send %q to %s: %w", cmd, g.Proc.Name, err)
	}
	return nil
}

// Next waits for the next event of kind want, skipping events of other
// kinds. A wire.EventFatal, the generator's exit and the end of ctx are
// errors; the last one's names the cause of ctx.
func (g *Gen) Next(ctx context.Context, want string) (wire.Event, error) {
	for {
		select {
		case <-ctx.Done():
			return wire.Event{}, fmt.Errorf("%s: no %q event: %w", g.Proc.Name, want, context.Cause(ctx))
		case e, ok := <-g.events:
			if !ok {
				return wire.Event{}, fmt.Errorf("%s exited before %q: %v", g.Proc.Name, want, g.Proc.Err())
			}
			if e.Event == wire.EventFatal {
				return wire.Event{}, fmt.Errorf("%s: %s", g.Proc.Name, e.Error)
			}
			if e.Event == want {
				return e, nil
			}
		}
	}
}

// Finish closes the generator's input, its signal to close its connections
// and quit, and waits for it to exit; after timeout it is stopped.
func (g *Gen) Finish(timeout time.Duration) {
	_ = g.stdin.Close()
	select {
	case <-g.Proc.done:
	case <-time.After(timeout):
		g.Proc.Stop(time.Second)
	}
}

// Gens is a set of generator processes driven together.
type Gens []*Gen

// All waits for one event of kind want from every generator, in parallel, so
// that one that failed is reported at once rather than after the others. The
// events are in the order of gs; the error is the first failure.
func (gs Gens) All(ctx context.Context, want string) ([]wire.Event, error) {
	out := make([]wire.Event, len(gs))
	errs := make([]error, len(gs))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() {
			out[i], errs[i] = g.Next(ctx, want)
			if errs[i] != nil {
				cancel(errs[i])
			}
		})
	}
	wg.Wait()
	if errors.Join(errs...) == nil {
		return out, nil
	}
	// The first failure cancelled the others; it is the one to report.
	return out, context.Cause(ctx)
}

// Send writes one command line to every generator.
func (gs Gens) Send(cmd string) error {
	var errs []error
	for _, g := range gs {
		errs = append(errs, g.Send(cmd))
	}
	return errors.Join(errs...)
}

// Finish finishes every generator at once, each within timeout.
func (gs Gens) Finish(timeout time.Duration) {
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() { g.Finish(timeout) })
	}
	wg.Wait()
}

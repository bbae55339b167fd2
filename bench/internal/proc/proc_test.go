package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/bench/internal/wire"
)

// childEnv selects what the test binary does when started as a child; the
// tests run it rather than shell commands so that they need nothing but Go.
const childEnv = "PROC_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "sleep":
		time.Sleep(time.Minute)
	case "stubborn":
		// It listens once SIGTERM is ignored, so that the test knows when.
		signal.Ignore(syscall.SIGTERM)
		listen()
	case "exit":
		fmt.Fprintln(os.Stderr, "giving up")
		os.Exit(3)
	case "listen":
		listen()
	case "gen":
		fakeGen()
	}
	os.Exit(0)
}

// listen listens on PROC_TEST_ADDR for a minute.
func listen() {
	ln, err := net.Listen("tcp", os.Getenv("PROC_TEST_ADDR"))
	if err != nil {
		os.Exit(4)
	}
	defer func() { _ = ln.Close() }()
	time.Sleep(time.Minute)
}

// freeAddr returns a local address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// fakeGen answers commands the way bench/loadgen does, one JSON event per
// line: "start" with a ready event, "fatal" with a fatal one, "noise" with
// a line that is no event and an event of another kind, "exit" by exiting.
func fakeGen() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case wire.CmdStart:
			fmt.Println(`{"event":"ready","conns":3,"errors":0}`)
		case "fatal":
			fmt.Println(`{"event":"fatal","errors":1,"error":"dial refused"}`)
		case "noise":
			fmt.Println("not json")
			fmt.Println(`{"event":"echoed","conns":3,"errors":0,"messages":3}`)
		case "exit":
			os.Exit(5)
		}
	}
}

// start runs this test binary as a child in mode, its log in logPath.
func start(t *testing.T, g *Group, mode string, env ...string) (p *Proc, logPath string) {
	t.Helper()
	logPath = filepath.Join(t.TempDir(), mode+".log")
	// Under -race a child that exits would first sleep a second.
	env = append(env, childEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
	p, err := g.Start(mode, env, logPath, nil, nil, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(time.Second) })
	return p, logPath
}

// startGen runs this test binary as a fake generator.
func startGen(t *testing.T, g *Group, name string) *Gen {
	t.Helper()
	// StartGen adds nothing to the environment; the child inherits ours.
	t.Setenv(childEnv, "gen")
	// Under -race a child that exits would first sleep a second.
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	gen, err := g.StartGen(name, filepath.Join(t.TempDir(), name+".log"), os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gen.Finish(time.Second) })
	return gen
}

func TestPin(t *testing.T) {
	got := Pin(1, "bin/edge", "-config", "edge.yaml")
	if want := []string{"taskset", "-c", "1", "bin/edge", "-config", "edge.yaml"}; !slices.Equal(got, want) {
		t.Errorf("Pin = %v, want %v", got, want)
	}
}

func TestStartMissingBinary(t *testing.T) {
	_, err := NewGroup().Start("ghost", nil, filepath.Join(t.TempDir(), "ghost.log"), nil, nil, "/nonexistent/ghost")
	if err == nil || !strings.Contains(err.Error(), "start ghost") {
		t.Errorf("Start of a missing binary: err = %v, want one naming the process", err)
	}
}

func TestStop(t *testing.T) {
	g := NewGroup()
	p, _ := start(t, g, "sleep")
	if p.Exited() || p.Err() != nil {
		t.Fatalf("fresh process: exited %v, err %v", p.Exited(), p.Err())
	}
	p.Stop(10 * time.Second)
	if !p.Exited() || p.Err() == nil || !strings.Contains(p.Err().Error(), "terminated") {
		t.Errorf("after Stop: exited %v, err %v; want ended by SIGTERM", p.Exited(), p.Err())
	}
	// A process that ignores SIGTERM is killed once grace has passed.
	addr := freeAddr(t)
	s, _ := start(t, g, "stubborn", "PROC_TEST_ADDR="+addr)
	if err := WaitListening(context.Background(), s, addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.Stop(100 * time.Millisecond)
	if !s.Exited() || s.Err() == nil || !strings.Contains(s.Err().Error(), "killed") {
		t.Errorf("after Stop of a stubborn process: exited %v, err %v; want killed", s.Exited(), s.Err())
	}
	s.Stop(time.Second) // stopping twice is harmless
}

func TestStopAll(t *testing.T) {
	g := NewGroup()
	var ps []*Proc
	for _, mode := range []string{"sleep", "stubborn", "sleep"} {
		p, _ := start(t, g, mode, "PROC_TEST_ADDR="+freeAddr(t))
		ps = append(ps, p)
	}
	g.StopAll(100 * time.Millisecond)
	for _, p := range ps {
		if !p.Exited() {
			t.Errorf("%s (pid %d) still runs after StopAll", p.Name, p.PID())
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.live) != 0 {
		t.Errorf("%d processes still listed as live", len(g.live))
	}
}

func TestWaitListening(t *testing.T) {
	addr := freeAddr(t)
	ctx := context.Background()
	g := NewGroup()
	l, _ := start(t, g, "listen", "PROC_TEST_ADDR="+addr)
	if err := WaitListening(ctx, l, addr, 30*time.Second); err != nil {
		t.Errorf("WaitListening on a listening child: %v", err)
	}
	l.Stop(time.Second)

	x, xlog := start(t, g, "exit")
	err := WaitListening(ctx, x, addr, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited before listening") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("WaitListening on an exiting child: err = %v, want its exit", err)
	}
	b, err := os.ReadFile(xlog)
	if err != nil || !strings.Contains(string(b), "giving up") {
		t.Errorf("the child's log = %q, %v; want its standard error", b, err)
	}

	s, _ := start(t, g, "sleep")
	if err := WaitListening(ctx, s, addr, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not listening") {
		t.Errorf("WaitListening past its timeout: err = %v, want not listening", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := WaitListening(cctx, s, addr, 30*time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitListening with an ended context: err = %v, want context.Canceled", err)
	}
}

func TestGen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := NewGroup()
	gs := Gens{startGen(t, g, "gen-1"), startGen(t, g, "gen-2")}
	if err := gs.Send(wire.CmdStart); err != nil {
		t.Fatal(err)
	}
	evs, err := gs.All(ctx, wire.EventReady)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Conns != 3 || evs[1].Conns != 3 {
		t.Errorf("All = %+v, want two ready events of 3 connections", evs)
	}
	// Lines that are no event, and events of other kinds, are skipped.
	if err := gs[0].Send("noise"); err != nil {
		t.Fatal(err)
	}
	if err := gs[0].Send(wire.CmdStart); err != nil {
		t.Fatal(err)
	}
	if e, err := gs[0].Next(ctx, wire.EventReady); err != nil || e.Event != wire.EventReady {
		t.Errorf("Next past noise = %+v, %v; want a ready event", e, err)
	}
	// A fatal event fails All at once, although the other generator never
	// answers.
	if err := gs[1].Send("fatal"); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.All(ctx, wire.EventResult); err == nil || !strings.Contains(err.Error(), "gen-2: dial refused") {
		t.Errorf("All with a fatal generator: err = %v, want its error", err)
	}
	// The end of ctx names its cause.
	tctx, tcancel := context.WithTimeoutCause(ctx, 50*time.Millisecond, errors.New("too slow"))
	defer tcancel()
	if _, err := gs[0].Next(tctx, wire.EventResult); err == nil || !strings.Contains(err.Error(), `gen-1: no "result" event: too slow`) {
		t.Errorf("Next past ctx: err = %v, want the cause", err)
	}
	// A generator that exits fails Next.
	if err := gs[0].Send("exit"); err != nil {
		t.Fatal(err)
	}
	if _, err := gs[0].Next(ctx, wire.EventResult); err == nil || !strings.Contains(err.Error(), "exited before") {
		t.Errorf("Next of an exited generator: err = %v", err)
	}
	// Closing the input ends a generator.
	gs[1].Finish(10 * time.Second)
	if !gs[1].Proc.Exited() || gs[1].Proc.Err() != nil {
		t.Errorf("after Finish: exited %v, err %v; want a clean exit", gs[1].Proc.Exited(), gs[1].Proc.Err())
	}
}

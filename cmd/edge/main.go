// Command edge is a WebSocket load balancer and TLS-terminating edge.
//
//	edge -config edge.yaml          run
//	edge -check -config edge.yaml   validate the file and list every problem: what
//	                                startup checks (certificates and keys read and
//	                                matched, addresses resolved and compared), binding nothing
//	edge -version                   print the version
//	edge -upgrade -config edge.yaml ask the edge running with this file (its
//	                                admin.address) to hand its listeners to
//	                                the binary at its path, wait for the
//	                                outcome, print it; exit 0 once the new
//	                                process serves, 1 with the reason if not
//
// SIGTERM or SIGINT drains: /readyz turns 503, listeners stop accepting,
// every WebSocket receives a close frame 1001 spread over drain.window, what
// is left is closed at drain.timeout, and edge exits 0. SIGHUP reloads the
// certificates, routes and static backends; a bad file keeps the running
// configuration and says why. SIGUSR2 (or edge -upgrade, or POST
// /api/v1/upgrade) starts the binary edge was started as, with the same
// arguments, hands it every listening socket and, once it serves, stops
// accepting and drains; a new process that fails to start or to become
// ready in upgrade.timeout changes nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/edgelb/edge/cmd/edge/internal/sdnotify"
	"github.com/edgelb/edge/conf"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// versionString is the version alone, for the start-up log.
func versionString() string { return currentBuild().Version }

// run is main without os.Exit, so tests can drive the binary's logic.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	probeURL := fs.String("probe", "", "GET this URL (e.g. http://127.0.0.1:9901/healthz) and exit 0 on a 2xx answer; for container health checks")
	upgrade := fs.Bool("upgrade", false, "ask the running edge (admin.address of -config) to upgrade to the binary at its path, and wait for the outcome")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "edge", currentBuild())
		return 0
	}
	if *probeURL != "" {
		return probe(*probeURL, stderr)
	}
	if *path == "" {
		fmt.Fprintln(stderr, "edge: -config FILE is required")
		return 2
	}
	// Before anything slow: SIGUSR2's default action would end a process
	// that is still starting; this way it is refused.
	usr2 := make(chan os.Signal, 1)
	if !*check && !*upgrade {
		notifyUpgrade(usr2)
		defer signal.Stop(usr2)
	}
	cfg, err := conf.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if *upgrade {
		return upgradeClient(cfg, stdout, stderr)
	}
	// The same checks for -check and for startup: a file that -check
	// passes does not fail at start for a reason found here.
	warns, err := preflight(cfg, *check)
	for _, w := range warns {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *check {
		fmt.Fprintf(stdout, "%s: configuration ok\n", *path)
		return 0
	}

	log := newLogger(cfg.Log, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// After the first signal, a second one stops at once instead of
	// waiting for the drain.
	context.AfterFunc(ctx, stop)
	notify := sdnotify.FromEnv()
	up, err := newUpgrader(cfg, args, notify.Socket(), log)
	if err != nil {
		log.Error("startup failed", "err", err)
		fmt.Fprintln(stderr, "edge:", err)
		return 1
	}
	e, err := newEdge(cfg, *path, log, up)
	if err != nil {
		log.Error("startup failed", "err", err)
		fmt.Fprintln(stderr, "edge:", err)
		return 1
	}
	// See cmd/edge/internal/gcpace. GOGC in the environment still wins.
	p := &process{e: e, notify: notify, hup: hup, usr2: usr2, gcTune: os.Getenv("GOGC") == ""}
	if err := p.serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(c conf.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == conf.LogText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

package main

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/edgelb/edge/cmd/edge/internal/gcpace"
	"github.com/edgelb/edge/cmd/edge/internal/sdnotify"
	"github.com/edgelb/edge/cmd/edge/internal/upgrade"
	"golang.org/x/sync/errgroup"
)

// process is edge's lifetime as a process: the signals it answers (SIGHUP
// reloads, SIGUSR2 upgrades, SIGINT and SIGTERM drain), what it tells the
// service manager, the collector's pacing, and how it ends: a drain, or a
// hand-over to the process an upgrade started. The components it runs are
// its edge's, built from the file by newEdge.
type process struct {
	e      *edge
	notify *sdnotify.Notifier // the service manager (systemd), if any
	hup    <-chan os.Signal   // reload
	usr2   <-chan os.Signal   // upgrade
	gcTune bool               // serve runs the GC tuner (cmd/edge/internal/gcpace)
}

// serve runs every component until ctx ends, then drains.
func (p *process) serve(ctx context.Context) error {
	e := p.e
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	g, gctx := errgroup.WithContext(bg)
	// The admin listener stops on its own when the listeners are handed
	// over: the new process answers from then on.
	adminCtx, stopAdmin := context.WithCancel(gctx)
	defer stopAdmin()
	if p.gcTune {
		// Until the drain is over: pacing matters during a drain too.
		g.Go(func() error { gcpace.New().Run(gctx); return nil })
	}
	e.start(gctx, adminCtx, g)
	p.becomeReady(gctx, g)
	if !e.admin.Loopback() {
		e.log.Warn("admin listener is not on loopback: /metrics, /status and the admin API are open to whoever reaches it",
			"admin", e.admin.Addr().String(), "pprof", e.config().Admin.Pprof)
	}

	var failed error
	handedOff := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-gctx.Done():
			failed = context.Cause(gctx)
			break loop
		case <-p.hup:
			p.sdNotify(p.notify.Reloading())
			status := e.reload()
			p.sdNotify(p.notify.Ready(status))
		case <-p.usr2:
			g.Go(func() error { _ = e.upgrade("", "SIGUSR2"); return nil })
		case <-e.up.HandedOff():
			handedOff = true
			break loop
		}
	}
	if handedOff {
		p.handOver(stopAdmin)
	} else {
		p.drain()
	}
	stopBG()
	if err := g.Wait(); err != nil && failed == nil && !errors.Is(err, context.Canceled) {
		failed = err
	}
	if errors.Is(failed, context.Canceled) {
		failed = nil
	}
	return failed
}

// drain is the graceful stop: readiness off, listeners closed, WebSockets
// sent 1001 spread over the window, the rest closed at the deadline.
// http.Server.Shutdown does not know hijacked connections (traefik#3630),
// hence proxy.Drain.
func (p *process) drain() {
	e := p.e
	e.mu.Lock()
	d := e.cfg.Drain
	e.mu.Unlock()
	e.admin.SetReady(false)
	// No upgrade from here on; one under way is called off.
	e.up.Stop()
	e.drainFrom.Store(int64(e.proxy.Active()))
	e.drainStart.Store(time.Now().UnixNano())
	e.admin.SetDraining()
	p.sdNotify(p.notify.Stopping())
	e.log.Info("draining", "connections", e.proxy.Active(), "delay", d.Delay.String(), "window", d.Window.String(), "timeout", d.Timeout.String())
	if d.Delay > 0 {
		// Keep accepting while whatever is in front of edge notices /readyz.
		time.Sleep(d.Delay.Std())
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout.Std())
	defer cancel()
	e.shutdownAndDrain(ctx, d.Window.Std())
	e.log.Info("drained", "left", e.proxy.Active())
}

// sdNotify logs a failure to reach the service manager; it never stops edge.
func (p *process) sdNotify(err error) {
	e := p.e
	if err != nil {
		e.log.Warn("service manager notification failed", "err", err)
	}
}

// handOver is the old process's end of a successful upgrade: the admin
// listener stops, then upgrade.Upgrader.HandOver stops the public
// listeners, lets the HTTP phase of accepted connections finish (so none
// of them gets the drain's 503) and moves live WebSockets to the new
// process (proxy.Server.Handoff); those that cannot move get a 1012 spread
// over drain.window, and a hand-off that fails leaves the rest to a drain
// (1001). HandOver bounds it by drain.timeout, grown with the count of
// live WebSockets.
func (p *process) handOver(stopAdmin context.CancelFunc) {
	e := p.e
	d := e.config().Drain
	e.drainFrom.Store(int64(e.proxy.Active()))
	e.drainStart.Store(time.Now().UnixNano())
	stopAdmin()
	e.log.Info("handed over: draining", "connections", e.proxy.Active(), "window", d.Window.String(), "timeout", d.Timeout.String())
	e.up.HandOver(context.Background(), handOverServer{Server: e.proxy, e: e}, upgrade.HandOverOptions{
		Window: d.Window.Std(), Timeout: d.Timeout.Std(), HandedOff: e.metrics.HandedOff, Log: e.log,
	})
}

// becomeReady ends the start, /readyz being true already: the service
// manager hears READY=1 (and MAINPID= from a process an upgrade started, which
// becomes the unit's main process), and a parent waiting on this process
// is told, which makes it stop accepting. An upgraded process then adopts
// the connections its parent hands over.
func (p *process) becomeReady(ctx context.Context, g *errgroup.Group) {
	e := p.e
	handoff, err := e.up.InheritedHandoff()
	if err != nil {
		e.log.Error("connection hand-off socket", "err", err)
	}
	e.log.Info("edge started", "version", versionString(), "pid", os.Getpid(), "parent", e.up.HasParent(), "listeners", len(e.listeners), "admin", e.admin.Addr().String(), "metrics", e.admin.MetricsAddress())
	if e.up.HasParent() {
		p.sdNotify(p.notify.ReadyAsMain(os.Getpid(), "serving; upgraded from pid "+strconv.Itoa(os.Getppid())))
	} else {
		p.sdNotify(p.notify.Ready("serving"))
	}
	if err := e.up.Ready(); err != nil {
		e.log.Error("upgrade", "err", err)
	}
	if handoff != nil {
		g.Go(func() error { return e.adopt(ctx, handoff) })
	}
	// A SIGUSR2 that came while this process was starting is refused, not
	// kept for later.
	select {
	case <-p.usr2:
		e.log.Warn("upgrade refused", "via", "SIGUSR2", "err", "the signal came before this process was serving")
		e.metrics.ProcessUpgraded("refused")
	default:
	}
}

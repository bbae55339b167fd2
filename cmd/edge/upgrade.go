package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/cmd/edge/internal/upgrade"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/proxy"
)

// newUpgrader takes the sockets a parent handed over, if any, and starts
// the next upgrade's process as this one was started: the binary at its
// path, args, the directory and environment it started with, and
// NOTIFY_SOCKET (which edge keeps out of its own environment) so the new
// process tells the manager it is the main process now.
//
// With upgrade.fleet_concurrency, every upgrade first takes a slot of the
// fleet's Consul semaphore (fleet.UpgradeSlots).
func newUpgrader(cfg *conf.Config, args []string, notifySocket string, log *slog.Logger) (*upgrade.Upgrader, error) {
	env := os.Environ()
	if notifySocket != "" {
		env = append(env, "NOTIFY_SOCKET="+notifySocket)
	}
	dir, err := os.Getwd()
	if err != nil {
		log.Warn("working directory unknown: an upgrade starts the new process in whatever it is then", "err", err)
	}
	opts := upgrade.Options{
		Child:   upgrade.Child{Path: upgrade.SelfBinary(), Args: args, Env: env, Dir: dir},
		Timeout: cfg.Upgrade.Timeout.Std(),
		Log:     log,
	}
	if n := cfg.Upgrade.FleetConcurrency; n > 0 {
		// A client of its own, so an answer on the prefix is bounded
		// before it is decoded (the semaphore lists PREFIX/upgrade).
		client, err := newConsulClient(cfg, fleet.MaxUpgradeSlotsResponse)
		if err != nil {
			return nil, fmt.Errorf("upgrade.fleet_concurrency: %w", err)
		}
		id := fleetEdgeID(cfg)
		opts.Gate = fleet.NewUpgradeSlots(client, fleet.UpgradeSlotsOptions{
			Prefix: cfg.Consul.Fleet.Prefix, Limit: n, ID: id, PID: os.Getpid(), Logger: log,
		})
		opts.GateWait = cfg.Upgrade.FleetWait.Std()
	}
	return upgrade.New(opts), nil
}

// upgrade runs one upgrade (cmd/edge/internal/upgrade) and counts it in
// edge_upgrades_total.
func (e *edge) upgrade(binary, via string) error {
	err := e.up.Upgrade(binary, via)
	switch {
	case errors.Is(err, upgrade.ErrRefused):
		e.metrics.ProcessUpgraded("refused")
	case err != nil:
		e.metrics.ProcessUpgraded("failed")
	default:
		e.metrics.ProcessUpgraded("ok")
	}
	return err
}

// handOverServer is the proxy's connections and the edge's public
// listeners, as upgrade.Upgrader.HandOver moves them.
type handOverServer struct {
	*proxy.Server
	e *edge
}

// StopAccepting stops the public listeners and waits for the HTTP phase
// of their connections, until ctx ends.
func (s handOverServer) StopAccepting(ctx context.Context) {
	s.e.stopAccepting(ctx)
	s.e.shutdownListeners(ctx)
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
	conns := make([]*proxy.ListenerConns, len(e.listeners))
	for i, l := range e.listeners {
		conns[i] = &l.conns
	}
	_ = e.proxy.WaitHTTPPhase(ctx, conns...) // ctx's end is the caller's bound
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

// apiUpgrader is the process upgrade as POST /api/v1/upgrade drives it
// (admin.UpgradeEndpoints): counted as the API's, and 409 when an upgrade
// is under way or this process may not start one.
type apiUpgrader struct{ e *edge }

// Upgrade implements admin.Upgrader.
func (a apiUpgrader) Upgrade(binary string) error {
	err := a.e.upgrade(binary, "api")
	if errors.Is(err, upgrade.ErrRefused) {
		return admin.Errorf(http.StatusConflict, "%v", err)
	}
	return err
}

// Binary implements admin.Upgrader.
func (a apiUpgrader) Binary() string { return a.e.up.Binary() }

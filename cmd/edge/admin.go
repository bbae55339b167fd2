package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
)

// admin is the listener for probes, metrics and status, on loopback unless
// admin.allow_public says otherwise (it has no authentication). It is
// never the public port: a scrape or a /readyz flip must not compete with
// client traffic, and status pages must not leak to clients. The optional
// metrics listener serves /metrics and /healthz alone, so it may face the
// network while the rest stays on loopback.
type admin struct {
	addr        string
	pprof       bool // serve /debug/pprof/ (admin.pprof)
	reg         *prometheus.Registry
	ready       atomic.Bool
	status      func() any
	api         *adminAPI // nil: no /api/v1/
	page        *statusPage
	log         *slog.Logger
	listener    net.Listener
	metricsAddr string       // "" = no metrics listener
	draining    atomic.Bool  // set once drain starts; never cleared
	metricsLn   net.Listener // nil without metricsAddr
	// bind opens an address; nil is net.Listen. An upgraded process
	// gets the sockets its predecessor handed over through it.
	bind func(addr string) (net.Listener, error)
}

func healthz(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }

func (a *admin) metricsEndpoint() http.Handler {
	return promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})
}

// metricsHandler serves the metrics listener: nothing but the scrape and a
// liveness probe (Consul's check of the edge-metrics service).
func (a *admin) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /metrics", a.metricsEndpoint())
	return mux
}

func (a *admin) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			// During drain the edge answers 503 so load balancers and Consul
			// stop sending new clients before the listeners close.
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", a.metricsEndpoint())
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.status())
	})
	if a.api != nil {
		a.api.register(mux)
	}
	if a.page != nil {
		mux.Handle("GET /{$}", a.page)
	}
	if a.pprof {
		// Off by default: profiles and traces cost CPU on demand, and
		// heap and goroutine dumps show request contents.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// listen binds the admin address (and the metrics address) early so a port
// conflict fails startup.
func (a *admin) listen() error {
	bind := a.bind
	if bind == nil {
		bind = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	l, err := bind(a.addr)
	if err != nil {
		return fmt.Errorf("admin listener %s: %w", a.addr, err)
	}
	a.listener = l
	if a.metricsAddr != "" {
		m, err := bind(a.metricsAddr)
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("metrics listener %s: %w", a.metricsAddr, err)
		}
		a.metricsLn = m
	}
	return nil
}

// close releases the listeners of an edge that never started serving.
func (a *admin) close() {
	_ = a.listener.Close()
	if a.metricsLn != nil {
		_ = a.metricsLn.Close()
	}
}

// Run serves the admin listener and the metrics listener until ctx ends.
func (a *admin) Run(ctx context.Context) error {
	if a.metricsLn == nil {
		return serveHTTP(ctx, a.listener, a.handler())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(gctx, a.listener, a.handler()) })
	g.Go(func() error { return serveHTTP(gctx, a.metricsLn, a.metricsHandler()) })
	return g.Wait()
}

// serveHTTP serves h on l until ctx ends. Then it stops accepting and
// answers what it accepted before it shuts down: net/http's Shutdown
// closes a connection whose request it reads after Shutdown began without
// an answer, and after an upgrade the new process shares this socket, so
// a client must get its answer from one of the two.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler) error {
	var fresh newConns
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ConnState: fresh.track}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(l) })
	g.Go(func() error {
		<-gctx.Done() // ctx ended, or Serve failed
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.SetKeepAlivesEnabled(false)
		_ = l.Close()
		fresh.wait(sctx)
		_ = srv.Shutdown(sctx)
		return nil
	})
	if err := g.Wait(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// newConns tracks the connections of a server that have not sent their
// first request yet (http.StateNew).
type newConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the server's ConnState hook.
func (n *newConns) track(c net.Conn, s http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s == http.StateNew {
		if n.conns == nil {
			n.conns = map[net.Conn]struct{}{}
		}
		n.conns[c] = struct{}{}
		return
	}
	delete(n.conns, c)
}

// wait returns once no connection waits for its first request, or when
// ctx ends.
func (n *newConns) wait(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n.mu.Lock()
		left := len(n.conns)
		n.mu.Unlock()
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

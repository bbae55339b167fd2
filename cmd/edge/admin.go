package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// admin is the listener for probes, metrics and status, on loopback unless
// admin.allow_public says otherwise (it has no authentication). It is
// never the public port: a scrape or a /readyz flip must not compete with
// client traffic, and status pages must not leak to clients.
type admin struct {
	addr     string
	pprof    bool // serve /debug/pprof/ (admin.pprof)
	reg      *prometheus.Registry
	ready    atomic.Bool
	status   func() any
	api      *adminAPI // nil: no /api/v1/
	page     *statusPage
	log      *slog.Logger
	listener net.Listener
}

func (a *admin) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			// During drain the edge answers 503 so load balancers and Consul
			// stop sending new clients before the listeners close.
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
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

// listen binds the admin address early so a port conflict fails startup.
func (a *admin) listen() error {
	l, err := net.Listen("tcp", a.addr)
	if err != nil {
		return err
	}
	a.listener = l
	return nil
}

// Run serves until ctx ends.
func (a *admin) Run(ctx context.Context) error {
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(a.listener) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

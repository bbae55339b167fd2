package admin

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

	"github.com/edgelb/edge/balance"
	"golang.org/x/sync/errgroup"
)

// Options are what a Server is built from. Pools, Conns, Status and
// Metrics are read at request time, so a reload that replaces pools needs
// nothing here but SetSettings.
type Options struct {
	// Address is the admin listener's host:port.
	Address string
	// MetricsAddress is the metrics-only listener's host:port; "" for none.
	MetricsAddress string
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Metrics serves /metrics (the caller knows the metrics library).
	Metrics http.Handler
	// Status is the /status document; the status page renders it.
	Status func() any
	// Pools lists the pools the API acts on, in the order to show them.
	Pools func() []*balance.Pool
	// Conns is the proxy side of drain and the connection list.
	Conns Conns
	// Fleet stores actions of fleet scope; nil refuses ?scope=fleet.
	Fleet Fleet
	// Endpoints are further API endpoints (the process upgrade, actions
	// of a wider scope), under the same authorization as the built-in ones.
	Endpoints []Endpoint
	// Bind opens an address; nil is net.Listen("tcp", addr). An upgraded
	// process gets the sockets its predecessor handed over through it.
	Bind func(addr string) (net.Listener, error)
	// Settings are the API's first settings; SetSettings replaces them.
	Settings Settings
	// Log receives the server's own problems; nil discards them.
	Log *slog.Logger
}

// Server is the admin listener (probes, metrics, status, the status page,
// the admin API, pprof) and the optional metrics listener. It is never the
// public port: a scrape or a /readyz flip must not compete with client
// traffic, and status pages must not leak to clients. The metrics listener
// serves /metrics and /healthz alone, so it may face the network while the
// rest stays on loopback.
type Server struct {
	opts      Options
	api       *api
	page      *statusPage
	listener  net.Listener
	metricsLn net.Listener // nil without MetricsAddress
	loopback  bool         // the admin listener accepts from this host only
	ready     atomic.Bool
	draining  atomic.Bool // set once a drain starts; never cleared
}

// New binds the admin address (and the metrics address) at once, so a port
// conflict fails startup, and builds the handlers.
func New(opts Options) (*Server, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Bind == nil {
		opts.Bind = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	s := &Server{opts: opts}
	l, err := opts.Bind(opts.Address)
	if err != nil {
		return nil, fmt.Errorf("admin listener %s: %w", opts.Address, err)
	}
	s.listener = l
	if opts.MetricsAddress != "" {
		m, err := opts.Bind(opts.MetricsAddress)
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("metrics listener %s: %w", opts.MetricsAddress, err)
		}
		s.metricsLn = m
	}
	s.loopback = isLoopback(l.Addr())
	s.api = newAPI(opts.Pools, opts.Conns, opts.Fleet, opts.Endpoints)
	s.api.settings.Store(&opts.Settings)
	if opts.Status != nil {
		s.page = newStatusPage(opts.Status)
	}
	if st := opts.Settings; st.Enabled && st.Write && st.Token == "" {
		opts.Log.Warn("admin.api has no token (token_file, token_env, or state_dir for a generated one): write operations are refused", "admin", opts.Address)
	}
	return s, nil
}

// Addr is the admin listener's address.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// MetricsAddr is where /metrics is served: the metrics listener's
// address, else the admin listener's.
func (s *Server) MetricsAddr() net.Addr {
	if s.metricsLn != nil {
		return s.metricsLn.Addr()
	}
	return s.listener.Addr()
}

// MetricsAddress is the metrics listener's configured address, "" for none.
func (s *Server) MetricsAddress() string { return s.opts.MetricsAddress }

// Loopback reports whether the admin listener accepts from this host only.
func (s *Server) Loopback() bool { return s.loopback }

// SetReady sets what /readyz answers: true 200, false 503.
func (s *Server) SetReady(v bool) { s.ready.Store(v) }

// Ready is what /readyz answers.
func (s *Server) Ready() bool { return s.ready.Load() }

// SetDraining records that a graceful stop began.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Draining reports whether a graceful stop began.
func (s *Server) Draining() bool { return s.draining.Load() }

// SetSettings replaces the API's settings (a reload).
func (s *Server) SetSettings(st Settings) { s.api.settings.Store(&st) }

// Settings are the API's current settings.
func (s *Server) Settings() Settings { return *s.api.settings.Load() }

// Close releases the listeners of a Server that never ran.
func (s *Server) Close() {
	_ = s.listener.Close()
	if s.metricsLn != nil {
		_ = s.metricsLn.Close()
	}
}

// Run serves the admin listener and the metrics listener until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if s.metricsLn == nil {
		return serveHTTP(ctx, s.listener, s.Handler())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(gctx, s.listener, s.Handler()) })
	g.Go(func() error { return serveHTTP(gctx, s.metricsLn, s.MetricsHandler()) })
	return g.Wait()
}

func healthz(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }

// MetricsHandler serves the metrics listener: nothing but the scrape and a
// liveness probe (Consul's check of the edge-metrics service).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	return s.hostGuard(mux)
}

// Handler serves the admin listener.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			// During drain the edge answers 503 so load balancers and Consul
			// stop sending new clients before the listeners close.
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	if s.opts.Status != nil {
		mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(s.opts.Status())
		})
		mux.Handle("GET /{$}", s.page)
	}
	s.api.register(mux)
	if s.opts.Pprof {
		// Off by default: profiles and traces cost CPU on demand, and
		// heap and goroutine dumps show request contents.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return s.hostGuard(mux)
}

// isLoopback reports whether a listener's address accepts only from this
// host.
func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
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

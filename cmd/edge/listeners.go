package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/edgelb/edge/cmd/edge/internal/sockets"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
)

// listener is one public port with its own HTTP server and TLS terminator.
type listener struct {
	cfg  conf.Listener
	ln   net.Listener
	srv  *http.Server
	term *edgetls.Terminator // nil for plain ws://
	// conns counts the listener's open client sockets.
	conns proxy.ListenerConns
}

// carriedTicketKeys is the ticket-key state the process that started
// this one carried for the listener (n names it), or nil.
func (e *edge) carriedTicketKeys(n string) []byte {
	b, err := e.up.Carried(n)
	if err != nil {
		e.log.Warn("session ticket keys of the previous process not read; fresh keys start", "err", err)
	}
	return b
}

// listenReusePort binds a public listener (sockets.Listen: SO_REUSEPORT,
// keep-alive and TCP_DEFER_ACCEPT on the listening socket).
func listenReusePort(addr string) (net.Listener, error) { return sockets.Listen(addr) }

func (e *edge) buildListener(cfg *conf.Config, lc conf.Listener) (*listener, error) {
	l := &listener{cfg: lc}
	lo := proxy.ListenerOptions{
		Name:           lc.Name,
		TLS:            lc.TLS != nil,
		TrustedProxies: lc.TrustedProxies,
		Forwarded:      lc.ForwardedHeader,
		StrictSNIHost:  lc.StrictSNIHost,
		// Per read of a plain request body; http.Server's ReadTimeout and
		// WriteTimeout would also bound hijacked WebSockets.
		ReadBodyTimeout: lc.ReadBodyTimeout.Std(),
	}
	if lc.TLS != nil {
		opts := tlsOptions(cfg, lc)
		if st := lc.TLS.SessionTickets; st.ConsulKey != "" && st.Enabled {
			src, err := newConsulTicketKeys(e.dyn.client, st)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
			}
			opts.Tickets.Source = src
		}
		if p := lc.TLS.OCSP.ConsulPrefix; p != "" {
			opts.OCSP.Share = fleet.NewStaples(e.dyn.client, p)
		}
		opts.Logger = e.log.With("listener", lc.Name)
		opts.Observer = e.metrics.TLSObserver(lc.Name)
		carry := "tickets:" + lc.Name
		opts.Tickets.Carried = e.carriedTicketKeys(carry)
		term, err := edgetls.New(opts)
		clear(opts.Tickets.Carried)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
		}
		l.term = term
		// Generated ticket keys go with an upgrade, so the sessions of
		// this process resume on the next (edgetls.Terminator.TicketState).
		e.up.Carry(carry, term.TicketState)
		lo.ClientCertHeader = lc.TLS.ClientCertHeader
	}
	ln, err := e.up.Listen(lc.Address, listenReusePort)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
	}
	if lc.ProxyProtocol.Enabled {
		ln = proxy.ListenProxyProtocol(ln, lc.ProxyProtocol.Trusted, lc.ProxyProtocol.Timeout.Std())
	}
	var connCtx func(context.Context, net.Conn) context.Context
	if l.term != nil {
		// The splice owns the TLS 1.3 records of WebSockets once the
		// handshake is done: proxy.ListenTLS sets it all up.
		tlsCfg := l.term.TLSConfig()
		if os.Getenv("SSLKEYLOGFILE") != "" {
			// crypto/tls does not read it, and its one key log hook is
			// the record layer's (proxy.ListenTLS): say so, not nothing.
			e.log.Warn("SSLKEYLOGFILE is ignored: the TLS key log hook carries edge's record layer", "listener", lc.Name)
		}
		e.metrics.CountHandshakes(lc.Name, tlsCfg)
		tln, cc, err := proxy.ListenTLS(ln, tlsCfg, e.accept, &l.conns)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
		}
		ln, connCtx = tln, cc
	} else {
		ln = proxy.WrapListenerCount(ln, e.accept, &l.conns)
	}
	l.ln = ln
	// net/http bounds the TLS handshake by the smallest of its read
	// timeouts, so the handshake gets min(tls_handshake_timeout,
	// read_header_timeout); a stalled handshake or slow headers close that
	// connection only.
	rht := lc.ReadHeaderTimeout.Std()
	if l.term != nil && lc.TLSHandshakeTimeout.Std() > 0 && lc.TLSHandshakeTimeout.Std() < rht {
		rht = lc.TLSHandshakeTimeout.Std()
	}
	l.srv = &http.Server{
		Handler:           e.proxy.Handler(lo),
		ReadHeaderTimeout: rht,
		MaxHeaderBytes:    lc.MaxHeaderBytes,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          e.metrics.HTTPErrorLog(lc.Name, e.log.With("listener", lc.Name)),
		// OPTIONS * goes to the proxy, which answers it within its answer
		// timeout; net/http's own handler would write with no deadline.
		DisableGeneralOptionsHandler: true,
	}
	l.srv.ConnContext = connCtx
	return l, nil
}

// serve runs the listener's HTTP server until it is shut down.
func (l *listener) serve() error {
	err := l.srv.Serve(l.ln)
	// ErrClosed: the listener closed before Shutdown, when the sockets
	// were handed to a new process (stopAccepting).
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("listener %s: %w", l.cfg.Name, err)
}

func (e *edge) closeListeners() {
	for _, l := range e.listeners {
		_ = l.ln.Close()
	}
}

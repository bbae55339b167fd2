package tls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Terminator owns the server side of TLS for edge's listeners: the
// certificates (chosen by SNI, reloaded without dropping connections), the
// session-ticket keys and their rotation, and OCSP staples. Build it with
// New, hand TLSConfig to tls.NewListener, and run Run for the background
// work. All methods are safe for concurrent use.
//
// It only composes three parts: the certificate store (store.go), the
// stapler (stapler.go) that keeps the store's staples, and the ticket keys
// (tickets.go).
type Terminator struct {
	opts    Options
	log     *slog.Logger
	base    *tls.Config
	store   *certStore
	stapler *stapler
	tickets *ticketRotation // nil when disabled
	running atomic.Bool
}

// suites12 are the only TLS 1.2 suites offered: forward secret (ECDHE) and
// AEAD. TLS 1.3 suites are not configurable in crypto/tls and are all AEAD.
var suites12 = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// New loads and checks every certificate pair (any problem is an error that
// names the file and says what is wrong), the client CA file, and the
// ticket key source, then fetches OCSP staples (or reads persisted ones) so
// that the first handshake already carries them.
func New(o Options) (*Terminator, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("edgetls: %w", err)
	}
	if len(o.Curves) > 0 {
		if err := negotiable(o.Curves); err != nil {
			return nil, fmt.Errorf("edgetls: %w", err)
		}
	}
	t := &Terminator{opts: o, log: o.Logger, stapler: newStapler(o)}
	var res CheckResult
	t.store, res = newCertStore(o, t.stapler)
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("edgetls: %w", err)
	}
	for _, w := range res.Warnings {
		// HAProxy and nginx start and serve the other certificates; so
		// does edge, and says loudly which one is left out.
		t.log.Error("certificate not usable, not served", "cert", o.Certificates[w.Cert].CertFile, "err", w.Err)
	}
	if t.base, err = t.config(); err != nil {
		return nil, fmt.Errorf("edgetls: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.store.resetStaples()
	t.stapler.refresh(ctx, t.store, false)
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	t.store.publish()
	for _, e := range t.store.entries {
		if e.unusable != nil {
			continue
		}
		t.log.Info("certificate loaded", "cert", e.files.CertFile, "names", e.cur.names,
			"key_type", e.cur.keyType, "not_after", e.cur.leaf.NotAfter, "ocsp", e.ocsp.state)
	}
	return t, nil
}

// config builds the base tls.Config and the ticket keys.
func (t *Terminator) config() (*tls.Config, error) {
	o := t.opts
	cfg := &tls.Config{
		MinVersion: o.MinVersion,
		// Go's defaults when nil: X25519MLKEM768 and the other hybrids
		// first, which OpenSSL 3.0 peers cannot negotiate and which cost
		// 1.26× X25519 per set-up (docs/BENCHMARKS.md, "2026-12-05:
		// connecting and echoing").
		CurvePreferences: o.Curves,
		CipherSuites:     suites12,
		GetCertificate:   t.store.getCertificate,
		// Only HTTP/1.1: the WebSocket upgrade (RFC 6455) needs it; RFC 8441
		// over h2 is not served.
		NextProtos: []string{"http/1.1"},
		Time:       t.opts.Now,
		// crypto/tls servers never renegotiate (Config.Renegotiation is a
		// client setting), which is what we want.
		SessionTicketsDisabled: o.Tickets.Disabled,
	}
	if o.ClientCAFile != "" {
		pool, err := clientCAs(o.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if !o.Tickets.Disabled {
		keys, err := newTicketKeys(o.Tickets, o.Now)
		if err != nil {
			return nil, fmt.Errorf("session tickets: %w", err)
		}
		t.tickets = &ticketRotation{keys: keys, log: t.log, obs: o.Observer}
		switch {
		case keys.carried:
			t.log.Info("session ticket keys carried over from the previous process", "keys", len(keys.keys), "generation", keys.gen)
		case keys.carryErr != nil:
			t.log.Warn("session ticket keys of the previous process refused; fresh keys start", "err", keys.carryErr)
		}
		// Callbacks rather than SetSessionTicketKeys: they survive
		// Config.Clone (net/http's ServeTLS and http2.ConfigureServer
		// clone the config, and a clone would keep stale keys forever),
		// they let retired keys be cleared, and the issue time sealed in the
		// ticket bounds its age exactly, whatever the key source.
		cfg.WrapSession = keys.wrap
		cfg.UnwrapSession = keys.unwrap
	}
	return cfg, nil
}

// TLSConfig returns a new *tls.Config for tls.NewListener. Every returned
// config (and any clone of it) follows certificate reloads, staple updates
// and key rotations.
func (t *Terminator) TLSConfig() *tls.Config { return t.base.Clone() }

// Reload re-reads every certificate pair now (main calls it on SIGHUP). A
// pair whose files are broken keeps serving its previous version; the error
// names each such file and the reason.
func (t *Terminator) Reload() error {
	return t.store.reloadAll(context.Background())
}

// Status reports the certificates and ticket keys; it takes no lock that
// writers hold.
func (t *Terminator) Status() Status {
	s := Status{Certificates: t.store.snapshot()}
	if t.tickets != nil {
		s.Tickets = t.tickets.keys.status()
	}
	return s
}

// Run does the background work until ctx ends: polling the certificate files
// every ReloadInterval, rotating generated ticket keys every RotateEvery (or
// polling the key source), refreshing OCSP staples and dropping expired
// ones. Every goroutine it starts has returned when it returns; a panic in
// one loop is logged and the loop restarted after a pause.
func (t *Terminator) Run(ctx context.Context) error {
	if !t.running.CompareAndSwap(false, true) {
		return errors.New("edgetls: Run is already running")
	}
	defer t.running.Store(false)
	var wg sync.WaitGroup
	start := func(name string, loop func(context.Context)) {
		wg.Go(func() { t.supervise(ctx, name, loop) })
	}
	if t.opts.ReloadInterval > 0 {
		start("files", func(ctx context.Context) {
			every(ctx, t.opts.ReloadInterval, func() { t.store.poll(ctx) })
		})
	}
	if t.tickets != nil {
		if name, loop := t.tickets.loop(t.opts.Tickets, t.opts.ReloadInterval); loop != nil {
			start(name, loop)
		}
	}
	if !t.opts.OCSP.Disabled {
		start("ocsp", func(ctx context.Context) { t.stapler.loop(ctx, t.store) })
	}
	wg.Wait()
	return nil
}

func every(ctx context.Context, d time.Duration, f func()) {
	tk := time.NewTicker(d)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			f()
		}
	}
}

// supervise runs loop until ctx ends, restarting it after a panic with a
// growing pause.
func (t *Terminator) supervise(ctx context.Context, name string, loop func(context.Context)) {
	pause := time.Second
	for ctx.Err() == nil {
		if !t.protect(ctx, name, loop) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Minute)
	}
}

// protect runs loop and reports whether it panicked.
func (t *Terminator) protect(ctx context.Context, name string, loop func(context.Context)) (panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			t.log.Error("background loop panicked, restarting", "loop", name, "panic", r, "stack", string(debug.Stack()))
			panicked = true
		}
	}()
	loop(ctx)
	return false
}

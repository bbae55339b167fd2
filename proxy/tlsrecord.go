package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/edgelb/edge/tls/record"
)

// Bounds of what an accepted TLS connection keeps of its own bytes until
// the takeover. A WebSocket handshake fits inside: one way the
// ClientHello, the client's flight (a certificate chain with client
// auth), the upgrade request (up to MaxHeaderBytes of headers) and what
// crypto/tls read ahead behind it (net/http's background read takes one
// record, up to 2^14+256 bytes, and a read may fill the rest of
// crypto/tls's buffer: another one); the other way the server's flight
// and its tickets. A connection that goes past a bound is left to
// crypto/tls for its whole life.
const (
	maxReadLog  = 64 << 10
	maxWriteLog = 32 << 10
)

// keyLogAge bounds how long the secrets of a handshake wait for their
// connection's takeover (a handshake that ends in a plain request, or in
// an upgrade refused, never takes them).
const (
	keyLogAge     = 2 * time.Minute
	keyLogEntries = 1 << 16
)

// ErrKeyLogWriterSet is ListenTLS's refusal of a tls.Config that already
// has a KeyLogWriter: the record layer takes the secrets through that
// hook, and crypto/tls calls only one writer.
var ErrKeyLogWriterSet = errors.New("tls.Config.KeyLogWriter is already set (an SSLKEYLOGFILE or debugging hook?): edge's TLS 1.3 record layer needs it")

// ListenTLS is the whole TLS side of a listener in one call: it wraps l
// (its accepted sockets counted against lim and in n, either may be nil)
// so that the readiness splice can own the TLS 1.3 records of its
// WebSockets once the handshake and the upgrade are done (tls/record), an
// idle connection then holding its keys and sequence numbers instead of
// crypto/tls's buffers; it installs the key log on cfg (cfg is the
// listener's, the Terminator's config; it must not be changed after), and
// returns the TLS listener and the http.Server.ConnContext that goes with
// it. A cfg whose KeyLogWriter is already set is refused with
// ErrKeyLogWriterSet rather than silently losing either use of it. The
// listener starts each handshake on a long-lived worker goroutine
// (handshakers.go); net/http's goroutine waits for it and handles its
// outcome as it would its own.
//
// The key log is crypto/tls's KeyLogWriter, documented as a debugging
// hook: it is the one way crypto/tls hands out the traffic secrets of a
// TLS-over-TCP handshake (tls/record's doc.go says why its QUIC secret
// events cannot serve). The writer keeps the two application secrets per
// client random in memory, bounded in count and age, writes nothing
// anywhere, and forgets what no connection took.
func ListenTLS(l net.Listener, cfg *tls.Config, lim *AcceptLimit, n *ListenerConns) (net.Listener, func(context.Context, net.Conn) context.Context, error) {
	ln, _, err := listenTLS(l, cfg, lim, n)
	if err != nil {
		return nil, nil, err
	}
	return ln, connContext, nil
}

// listenTLS is ListenTLS, also returning the record layer (for tests).
func listenTLS(l net.Listener, cfg *tls.Config, lim *AcceptLimit, n *ListenerConns) (net.Listener, *recordLayer, error) {
	if cfg.KeyLogWriter != nil {
		return nil, nil, ErrKeyLogWriterSet
	}
	rl := &recordLayer{keys: record.NewKeyLog(keyLogAge, keyLogEntries, time.Now)}
	cfg.KeyLogWriter = rl.keys
	return newHandshakeListener(&readyListener{Listener: l, lim: lim, cnt: n, rec: rl}, cfg), rl, nil
}

// recordLayer holds one listener's key log: the application traffic
// secrets of each handshake, until its connection takes them.
type recordLayer struct {
	keys *record.KeyLog
}

// tlsLog holds the bytes crypto/tls read from and wrote to one accepted
// connection, from the ClientHello to the takeover: record.Resume replays
// them to find the sequence numbers and key generation crypto/tls
// reached. net/http's background read can run beside a handler's write,
// hence the lock.
type tlsLog struct {
	mu   sync.Mutex
	keys *record.KeyLog
	r, w []byte
	off  bool
	// random is the client random of a log that stopped: a log stopped
	// inside the handshake (a ClientHello past maxReadLog) ends before
	// crypto/tls logs the secrets, which end forgets when the connection
	// closes.
	random []byte
}

func (l *tlsLog) read(p []byte) {
	l.mu.Lock()
	if !l.off {
		if len(l.r)+len(p) > maxReadLog {
			// p may hold the rest of the ClientHello's random.
			l.r = append(l.r, p...)
			l.stopLocked()
		} else {
			l.r = append(l.r, p...)
		}
	}
	l.mu.Unlock()
}

func (l *tlsLog) wrote(p []byte) {
	l.mu.Lock()
	if !l.off {
		if len(l.w)+len(p) > maxWriteLog {
			l.stopLocked()
		} else {
			l.w = append(l.w, p...)
		}
	}
	l.mu.Unlock()
}

// stop ends the log for good and drops the handshake's secrets.
func (l *tlsLog) stop() {
	l.mu.Lock()
	l.stopLocked()
	l.mu.Unlock()
}

func (l *tlsLog) stopLocked() {
	if l.off {
		return
	}
	l.off = true
	if cr, ok := record.ClientRandom(l.r); ok {
		l.random = cr
		l.keys.Forget(cr)
	}
	l.r, l.w = nil, nil
}

// end is stop for a connection that closes: the secrets of a handshake
// that finished after its log stopped are dropped as well.
func (l *tlsLog) end() {
	l.mu.Lock()
	l.stopLocked()
	if l.random != nil {
		l.keys.Forget(l.random)
		l.random = nil
	}
	l.mu.Unlock()
}

// take ends the log and returns both halves and the handshake's secrets;
// ok is false when the log was stopped or the secrets are gone.
func (l *tlsLog) take() (rlog, wlog, cs, ss []byte, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.off {
		return nil, nil, nil, nil, false
	}
	l.off = true
	rlog, wlog = l.r, l.w
	l.r, l.w = nil, nil
	cr, found := record.ClientRandom(rlog)
	if !found {
		return nil, nil, nil, nil, false
	}
	cs, ss, ok = l.keys.Take(cr)
	return rlog, wlog, cs, ss, ok
}

type connCtxKey struct{}

// connContext is the http.Server.ConnContext of a listener from
// ListenTLS: a connection whose first request is not a WebSocket upgrade
// then drops its handshake log at once instead of keeping it until it
// closes.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if ec := edgeConnOf(c); ec != nil && ec.log != nil {
		return context.WithValue(ctx, connCtxKey{}, ec.log)
	}
	return ctx
}

// stopHandshakeLog drops the handshake log of the request's connection.
func stopHandshakeLog(ctx context.Context) {
	if l, ok := ctx.Value(connCtxKey{}).(*tlsLog); ok {
		l.stop()
	}
}

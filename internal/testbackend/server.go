package testbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Server is one running backend.
type Server struct {
	// ID is what the backend answers to "whoami".
	ID string

	ln   net.Listener
	srv  *http.Server
	up   websocket.Upgrader
	log  *slog.Logger
	mu   sync.Mutex
	ws   map[*websocket.Conn]struct{}
	done chan struct{}

	accepts atomic.Int64
	heads   []string // guarded by mu: every request's line and header, as received
}

// countingListener counts the connections the backend accepts: what a
// test asserts was never dialled.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Accepts is the number of TCP connections the backend accepted.
func (s *Server) Accepts() int64 { return s.accepts.Load() }

// Heads returns every request the backend received: its request line
// and header lines, as text (a test greps them for what must never reach
// a backend).
func (s *Server) Heads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.heads...)
}

// maxHeads bounds the requests Heads keeps.
const maxHeads = 10000

func (s *Server) record(r *http.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\n", r.Method, r.RequestURI, r.Proto)
	_ = r.Header.Write(&b)
	s.mu.Lock()
	if len(s.heads) < maxHeads {
		s.heads = append(s.heads, b.String())
	}
	s.mu.Unlock()
}

// Start listens on a free loopback port and serves until Close.
func Start(id string) (*Server, error) {
	return Listen(id, "127.0.0.1:0", nil)
}

// Listen serves on addr until Close. A nil logger discards logs.
func Listen(id, addr string, log *slog.Logger) (*Server, error) {
	return ListenWith(id, addr, log, Options{})
}

// Options change how a backend speaks WebSocket.
type Options struct {
	// Deflate accepts permessage-deflate (gorilla/websocket negotiates it
	// without context takeover) and compresses what it writes.
	Deflate bool
}

// ListenWith is Listen with options.
func ListenWith(id, addr string, log *slog.Logger, o Options) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("testbackend %s: listen %s: %w", id, addr, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		ID:   id,
		ln:   ln,
		log:  log,
		ws:   map[*websocket.Conn]struct{}{},
		done: make(chan struct{}),
		// Subprotocols: the first of the client's offer among these is
		// answered, as an application picks its protocol.
		// Small buffers: the benchmark holds thousands of idle connections.
		up: websocket.Upgrader{
			ReadBufferSize:    1024,
			WriteBufferSize:   1024,
			CheckOrigin:       func(*http.Request) bool { return true },
			EnableCompression: o.Deflate,
			Subprotocols:      []string{"chat", "edge.test"},
		},
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(countingListener{ln, &s.accepts}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve", "err", err)
		}
	}()
	return s, nil
}

// Addr returns the host:port the backend listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the listener and closes every open WebSocket.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	s.mu.Lock()
	for c := range s.ws {
		_ = c.Close()
	}
	s.mu.Unlock()
	<-s.done
}

// Conns returns the number of open WebSocket connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ws)
}

// headers is the JSON answer to "headers" and /headers.
func headers(r *http.Request) []byte {
	h := map[string][]string{}
	for k, v := range r.Header {
		h[k] = v
	}
	h["Host"] = []string{r.Host}
	h["RemoteAddr"] = []string{r.RemoteAddr}
	b, _ := json.Marshal(h)
	return b
}

// ServeHTTP answers plain HTTP and upgrades WebSocket requests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.record(r)
	if !websocket.IsWebSocketUpgrade(r) {
		switch r.URL.Path {
		case "/whoami":
			_, _ = w.Write([]byte(s.ID))
		case "/headers":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(headers(r))
		case "/status":
			// /status?code=403 answers that status: lets tests see non-101 relaying.
			code, _ := strconv.Atoi(r.URL.Query().Get("code"))
			if code < 200 || code > 599 {
				code = http.StatusOK
			}
			w.WriteHeader(code)
			_, _ = w.Write([]byte(s.ID))
		default:
			_, _ = fmt.Fprintf(w, "%s %s\n", s.ID, r.URL.Path)
		}
		return
	}
	if strings.HasPrefix(r.URL.Path, "/reject") {
		// A WebSocket request the application refuses before upgrading.
		http.Error(w, "rejected by "+s.ID, http.StatusForbidden)
		return
	}
	c, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.ws[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.ws, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	hdr := headers(r)
	for {
		mt, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		switch {
		case mt == websocket.TextMessage && string(msg) == "whoami":
			msg = []byte(s.ID)
		case mt == websocket.TextMessage && string(msg) == "headers":
			msg = hdr
		case mt == websocket.TextMessage && strings.HasPrefix(string(msg), "close:"):
			// "close:CODE" makes the backend end the connection with that code.
			code, _ := strconv.Atoi(strings.TrimPrefix(string(msg), "close:"))
			_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, s.ID), time.Now().Add(time.Second))
			continue
		}
		if err := c.WriteMessage(mt, msg); err != nil {
			return
		}
	}
}

// Command echobackend is the benchmark's WebSocket echo backend, used when
// cmd/edge-backend is not built. It speaks the same command line
// (-listen ADDR -id NAME) and answers like the repository's test backend: a
// WebSocket upgrade on any path echoes every message, except the text message
// "whoami" (answers the id) and "headers" (answers the upgrade request's
// headers as JSON); plain GET /whoami and /headers answer the same.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "address to listen on")
	id := flag.String("id", "backend", "identity answered to whoami")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *id, log); err != nil {
		log.Error("echobackend failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, id string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	up := websocket.Upgrader{
		ReadBufferSize:  1024,
		WriteBufferSize: 1024,
		CheckOrigin:     func(*http.Request) bool { return true },
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			switch r.URL.Path {
			case "/headers":
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(r.Header)
			default:
				_, _ = io.WriteString(w, id)
			}
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		echo(c, id, r.Header)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		// Hijacked connections are not tracked by Shutdown; exiting the
		// process closes them.
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve %s: %w", addr, err)
	}
}

// echo answers every message with the same type and bytes until the peer
// closes.
func echo(c *websocket.Conn, id string, hdr http.Header) {
	buf := make([]byte, 0, 1024)
	for {
		mt, r, err := c.NextReader()
		if err != nil {
			return
		}
		buf = buf[:0]
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		out := buf
		if mt == websocket.TextMessage {
			switch string(buf) {
			case "whoami":
				out = []byte(id)
			case "headers":
				out, _ = json.Marshal(hdr)
			}
		}
		if err := c.WriteMessage(mt, out); err != nil {
			return
		}
	}
}

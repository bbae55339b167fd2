// Command edge-backend is a small WebSocket echo backend for edge's demo and
// benchmarks. It answers "whoami" with its id and "headers" with the headers
// it received, so a client can see which backend answered and what the edge
// forwarded. With -consul it registers itself in a Consul agent.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/edgelb/edge/internal/testbackend"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "address to listen on")
	id := flag.String("id", "", "backend id (default: the listen address)")
	flag.Parse()
	if *id == "" {
		*id = *listen
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	s, err := testbackend.Listen(*id, *listen, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	log.Info("listening", "id", *id, "addr", s.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	s.Close()
}

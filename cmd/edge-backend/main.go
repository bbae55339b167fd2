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
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/edgelb/edge/internal/testbackend"
	"github.com/hashicorp/consul/api"
)

// register adds this backend to the local Consul agent with an HTTP check
// and returns the function that removes it.
func register(agent, service, addr string) (func(), error) {
	cfg := api.DefaultConfig()
	cfg.Address = agent
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client %s: %w", agent, err)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portStr)
	id := fmt.Sprintf("%s-%d", service, port)
	reg := &api.AgentServiceRegistration{
		ID:      id,
		Name:    service,
		Address: host,
		Port:    port,
		Check: &api.AgentServiceCheck{
			HTTP:                           "http://" + addr + "/whoami",
			Interval:                       "1s",
			Timeout:                        "1s",
			DeregisterCriticalServiceAfter: "1m",
		},
	}
	if err := client.Agent().ServiceRegister(reg); err != nil {
		return nil, fmt.Errorf("register %s in consul %s: %w", id, agent, err)
	}
	return func() { _ = client.Agent().ServiceDeregister(id) }, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "address to listen on")
	id := flag.String("id", "", "backend id (default: the listen address)")
	consul := flag.String("consul", "", "Consul agent address to register in (host:port); empty: do not register")
	service := flag.String("service", "demo", "Consul service name to register under")
	deflate := flag.Bool("deflate", false, "accept permessage-deflate (gorilla/websocket: no context takeover) and compress the echoes")
	flag.Parse()
	if *id == "" {
		*id = *listen
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	s, err := testbackend.ListenWith(*id, *listen, log, testbackend.Options{Deflate: *deflate})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	log.Info("listening", "id", *id, "addr", s.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *consul != "" {
		deregister, err := register(*consul, *service, s.Addr())
		if err != nil {
			log.Error("consul registration failed", "err", err)
			s.Close()
			os.Exit(1)
		}
		defer deregister()
		log.Info("registered in consul", "service", *service, "agent", *consul)
	}
	<-ctx.Done()
	s.Close()
}

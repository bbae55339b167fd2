package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// RegisterOptions describe edge's own registration in Consul.
type RegisterOptions struct {
	Service string            // service name, e.g. "edge"; required
	ID      string            // instance id; default Service
	Address string            // advertised address; default the agent's node address
	Port    int               // advertised port (the public listener)
	Tags    []string          // optional
	Meta    map[string]string // optional
	// CheckURL is polled by the Consul agent (HTTP GET, 2xx passes); use the
	// admin listener's /readyz so a draining edge leaves the catalog before
	// it stops. Empty registers no check.
	CheckURL string
	// Interval and Timeout of the check; defaults 10s and 5s.
	Interval, Timeout time.Duration
	// DeregisterAfter removes the instance after it has been critical this
	// long (an edge that died without deregistering); default 0 (never).
	// Consul enforces a minimum of one minute.
	DeregisterAfter time.Duration
}

// Register registers the instance with the local agent (replacing its checks,
// so registering again is idempotent) and returns the function that removes
// it at shutdown.
func Register(ctx context.Context, client *api.Client, opts RegisterOptions) (deregister func(context.Context) error, err error) {
	if client == nil {
		return nil, errors.New("discovery: register: consul client is required")
	}
	if opts.Service == "" {
		return nil, errors.New("discovery: register: service is required")
	}
	if opts.Port <= 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("discovery: register %q: port %d out of range", opts.Service, opts.Port)
	}
	if opts.ID == "" {
		opts.ID = opts.Service
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	reg := &api.AgentServiceRegistration{
		ID:      opts.ID,
		Name:    opts.Service,
		Address: opts.Address,
		Port:    opts.Port,
		Tags:    opts.Tags,
		Meta:    opts.Meta,
	}
	if opts.CheckURL != "" {
		reg.Check = &api.AgentServiceCheck{
			CheckID:  "service:" + opts.ID + ":readyz",
			Name:     opts.Service + " readiness",
			HTTP:     opts.CheckURL,
			Method:   "GET",
			Interval: opts.Interval.String(),
			Timeout:  opts.Timeout.String(),
		}
		if opts.DeregisterAfter > 0 {
			reg.Check.DeregisterCriticalServiceAfter = opts.DeregisterAfter.String()
		}
	}
	ro := api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)
	if err := client.Agent().ServiceRegisterOpts(reg, ro); err != nil {
		return nil, fmt.Errorf("discovery: register %q as %q: %w", opts.Service, opts.ID, err)
	}
	id := opts.ID
	return func(ctx context.Context) error { return deregisterID(ctx, client, id) }, nil
}

func deregisterID(ctx context.Context, client *api.Client, id string) error {
	q := (&api.QueryOptions{}).WithContext(ctx)
	if err := client.Agent().ServiceDeregisterOpts(id, q); err != nil {
		return fmt.Errorf("discovery: deregister %q: %w", id, err)
	}
	return nil
}

// KeepRegistered registers each of regs (see Register; ID required),
// retrying with backoff (1 s doubling to 30 s) while the agent is
// unreachable, and deregisters what it registered once ctx ends, within
// 3 s. A registration cut short by the end of ctx may have reached the agent
// all the same, so it is deregistered too, quietly. It returns when ctx
// ended and the deregistrations are done.
func KeepRegistered(ctx context.Context, client *api.Client, regs []RegisterOptions, log *slog.Logger) {
	var deregs []func(context.Context) error
	inFlight := ""
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		for _, dereg := range deregs {
			if err := dereg(dctx); err != nil {
				log.Warn("consul deregistration failed", "err", err)
			}
		}
		if inFlight != "" {
			_ = deregisterID(dctx, client, inFlight)
		}
	}()
	for _, opts := range regs {
		backoff := time.Second
		for {
			dereg, err := Register(ctx, client, opts)
			if err == nil {
				log.Info("registered in consul", "service", opts.Service, "id", opts.ID, "port", opts.Port)
				deregs = append(deregs, dereg)
				break
			}
			if ctx.Err() != nil {
				inFlight = opts.ID
				return
			}
			log.Warn("consul registration failed; retrying", "service", opts.Service, "err", err, "in", backoff.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}
	<-ctx.Done()
}

// Advertised is the address and port to announce for a bound address: a
// specific IP as is, a wildcard as "" (Consul then announces the node's
// address).
func Advertised(a net.Addr) (string, int) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return "", 0
	}
	if ap.Addr().IsUnspecified() {
		return "", int(ap.Port())
	}
	return ap.Addr().Unmap().String(), int(ap.Port())
}

// CheckAddr is how the local Consul agent reaches a listener bound at a: a
// wildcard bind is reachable on loopback.
func CheckAddr(a net.Addr) string {
	host, port := Advertised(a)
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// ServiceIDPart keeps what Consul takes in a service ID that travels in
// URL paths (/v1/agent/service/deregister/<id>): letters, digits, '.',
// '_' and '-'; anything else becomes '-'.
func ServiceIDPart(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
}

// SelfOptions describe edge's own two registrations (SelfRegistrations).
type SelfOptions struct {
	Service        string // consul.register.service
	MetricsService string // consul.register.metrics_service
	// Instance names this edge among the others; "" is Host and the admin
	// address, which no two processes on a host share.
	Instance string
	Host     string // this machine's name, for the default Instance
	// Public is the bound public listener, Admin the admin listener, and
	// Metrics the endpoint Prometheus scrapes (the metrics listener, else
	// the admin one).
	Public, Admin, Metrics net.Addr
}

// SelfRegistrations are edge's two registrations: the public listener as
// Service with a check on the admin /readyz every 2 s (so a draining edge
// leaves the catalog before it stops, and a dead one is removed after a
// minute), and the metrics endpoint as MetricsService with a check on its
// /healthz every 10 s (it stays while the edge drains, so the drain can be
// watched, and a dead edge shows as down to Prometheus for ten minutes).
// IDs are the service and the instance, kept to the characters Consul
// takes in a URL path (ServiceIDPart).
func SelfRegistrations(o SelfOptions) []RegisterOptions {
	instance := o.Instance
	if instance == "" {
		// The admin port is the one no two processes on a host share:
		// the public one may be (SO_REUSEPORT), and several edges
		// registering one ID overwrite each other in the catalog.
		instance = o.Host + "-" + o.Admin.String()
	}
	instance = ServiceIDPart(instance)
	pubHost, pubPort := Advertised(o.Public)
	mHost, mPort := Advertised(o.Metrics)
	return []RegisterOptions{{
		Service:         o.Service,
		ID:              o.Service + "-" + instance,
		Address:         pubHost,
		Port:            pubPort,
		Meta:            map[string]string{"instance": instance},
		CheckURL:        "http://" + CheckAddr(o.Admin) + "/readyz",
		Interval:        2 * time.Second,
		DeregisterAfter: time.Minute,
	}, {
		Service:  o.MetricsService,
		ID:       o.MetricsService + "-" + instance,
		Address:  mHost,
		Port:     mPort,
		Meta:     map[string]string{"instance": instance},
		CheckURL: "http://" + CheckAddr(o.Metrics) + "/healthz",
		Interval: 10 * time.Second,
		// Long enough for EdgeDown (up == 0 for 1m) to fire before a
		// dead edge's target disappears from Prometheus.
		DeregisterAfter: 10 * time.Minute,
	}}
}

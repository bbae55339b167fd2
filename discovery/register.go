package discovery

import (
	"context"
	"errors"
	"fmt"
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
	return func(ctx context.Context) error {
		q := (&api.QueryOptions{}).WithContext(ctx)
		if err := client.Agent().ServiceDeregisterOpts(id, q); err != nil {
			return fmt.Errorf("discovery: deregister %q: %w", id, err)
		}
		return nil
	}, nil
}

package conf

import "time"

// PoolDeclaration is what a service declares of its own pool in the
// registry (discovery.RouteDecl, mapped by its consumer): each field left
// zero is not declared and keeps a file pool's default.
type PoolDeclaration struct {
	// Service is the Consul service the pool follows.
	Service string
	// Balance is the pool's balance mode ("" keeps the default).
	Balance string
	// MaxConnections and MaxConnectionsPerClientIP are the pool's limits.
	MaxConnections            int64
	MaxConnectionsPerClientIP int
	// Health is the type of edge's active check, HealthInterval the time
	// between two probes of one backend.
	Health         string
	HealthInterval time.Duration
}

// DeclaredPoolName names the pool made for a service; the prefix keeps it
// apart from the file's pool names, which cannot contain ':'.
func DeclaredPoolName(service string) string { return "consul:" + service }

// DeclaredPool is the pool a declaration asks for: a file pool's defaults
// (DefaultPool) with the declaration's own settings. A declared interval
// shorter than the default timeout shortens the timeout with it, as
// Validate requires of a file's pool.
func DeclaredPool(d PoolDeclaration) Pool {
	pc := DefaultPool()
	pc.Name = DeclaredPoolName(d.Service)
	pc.Consul.Service = d.Service
	if d.Balance != "" {
		pc.Balance = d.Balance
	}
	pc.Limits.MaxConnections = d.MaxConnections
	pc.Limits.MaxConnectionsPerClientIP = d.MaxConnectionsPerClientIP
	if d.Health != "" {
		pc.Health.Type = d.Health
	}
	if d.HealthInterval > 0 {
		pc.Health.Interval = Duration(d.HealthInterval)
		pc.Health.Timeout = min(pc.Health.Timeout, pc.Health.Interval)
	}
	return pc
}

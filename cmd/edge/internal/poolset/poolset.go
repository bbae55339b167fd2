package poolset

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/health"
	"github.com/edgelb/edge/proxy"
)

// Spec is one conf.Pool mapped onto the options of balance, proxy and
// health. SpecOf is the one place that reads a pool's settings, for the
// file's pools and the pools services declare in the registry alike.
type Spec struct {
	Name    string
	Balance balance.PoolOptions // OnEject is set where the pool is built
	Limits  balance.LimiterOptions
	Rate    [2]float64 // pool-wide connection rate and burst
	// fleet is the limits of fleet scope, which fleet.Shares shares.
	Fleet FleetLimits
	// proxy is the pool's proxy settings; Balancer, Limiter and Admission
	// are set where the pool is built.
	Proxy proxy.Pool
	// health is the active checks; nil when there are none. Source,
	// Logger and Observer are set where the checker starts.
	Health *health.Options
	Leave  conf.BackendLeave // what becomes of a departed backend's connections
	// Auth is the pool's token policy, mapped by Builder.Auth.
	Auth conf.PoolAuth
	// Rebalance is the pool's rebalancing of live connections.
	Rebalance conf.Rebalance
	Consul    conf.PoolConsul
	// cookieKV is the Consul KV entry of the cookie keys, or "".
	CookieKV string
	// static: the members come from the file, not from discovery.
	Static  bool
	Members []balance.Member
}

// SpecOf maps pc. The cookie keys are read here (secret files and
// variables), so a pool whose secret cannot be read is refused.
func SpecOf(pc *conf.Pool) (*Spec, error) {
	mode, err := balance.ParseMode(pc.Balance)
	if err != nil {
		return nil, err // conf.Validate already refused unknown modes
	}
	var keys [][]byte
	if mode == balance.Cookie {
		cur, prev, err := pc.Cookie.Secrets()
		if err != nil {
			return nil, err
		}
		if cur != nil {
			keys = append(append(keys, cur), prev...)
		}
	}
	s := &Spec{
		Name: pc.Name,
		Balance: balance.PoolOptions{
			Name:               pc.Name,
			Mode:               mode,
			BoundedLoad:        pc.ClientIP.BoundedLoad,
			MinExcess:          minExcess(pc.ClientIP.MinExcess),
			MaxConnsPerBackend: pc.Limits.MaxConnectionsPerBackend,
			SlowStart:          pc.SlowStart.Std(),
			Eject: balance.EjectOptions{
				Failures:   pc.PassiveEjection.Failures,
				Window:     pc.PassiveEjection.Window.Std(),
				Cooldown:   pc.PassiveEjection.Cooldown.Std(),
				MaxPercent: pc.PassiveEjection.MaxEjectionPercent,
			},
			Cookie:         balance.CookieOptions{Keys: keys},
			StartUnhealthy: pc.Health.Type != conf.HealthNone,
		},
		Limits: balance.LimiterOptions{
			MaxConnsPerIP: pc.Limits.MaxConnectionsPerClientIP,
			Rate:          pc.Limits.ConnectionRatePerClientIP,
			Burst:         pc.Limits.ConnectionBurstPerClientIP,
		},
		Rate:      [2]float64{pc.Limits.ConnectionRate, float64(pc.Limits.ConnectionBurst)},
		Proxy:     proxyPoolOf(pc),
		Health:    healthOf(pc),
		Leave:     pc.BackendLeave,
		Auth:      pc.Auth,
		Rebalance: pc.Rebalance,
		Consul:    pc.Consul,
		CookieKV:  pc.Cookie.ConsulKey,
		Static:    pc.Consul.Service == "",
	}
	if pc.Limits.MaxConnectionsPerBackendScope == conf.ScopeFleet {
		s.Fleet.Conns = pc.Limits.MaxConnectionsPerBackend
	}
	if pc.Limits.ConnectionRateScope == conf.ScopeFleet {
		s.Fleet.Rate, s.Fleet.Burst = pc.Limits.ConnectionRate, pc.Limits.ConnectionBurst
	}
	for _, b := range pc.Backends {
		s.Members = append(s.Members, balance.Member{ID: b.ID, Addr: b.Address, Weight: b.Weight, Version: b.Version})
	}
	return s, nil
}

// FleetLimits are a pool's limits of fleet scope; 0 is none.
type FleetLimits struct {
	Conns int64   // max_connections_per_backend
	Rate  float64 // connection_rate
	Burst int     // connection_burst
}

// proxyPoolOf maps pc's settings of the connection path.
func proxyPoolOf(pc *conf.Pool) proxy.Pool {
	return proxy.Pool{
		Name:                 pc.Name,
		MaxConns:             pc.Limits.MaxConnections,
		DialTimeout:          pc.Timeouts.Dial.Std(),
		HandshakeTimeout:     pc.Timeouts.Handshake.Std(),
		IdleTimeout:          pc.Timeouts.Idle.Std(),
		WriteTimeout:         pc.Timeouts.Write.Std(),
		Retries:              pc.Retries,
		MaxFrameBytes:        pc.WebSocket.MaxFrameBytes,
		PingInterval:         pc.WebSocket.PingInterval.Std(),
		PingTimeout:          pc.WebSocket.PingTimeout.Std(),
		MaxMessageBytes:      pc.WebSocket.MaxMessageBytes,
		Deflate:              proxy.DeflatePolicy(pc.WebSocket.Deflate),
		DeflateMaxWindowBits: pc.WebSocket.DeflateMaxWindowBits,
		RateMessages:         pc.WebSocket.Rate.MessagesPerSecond,
		RateMessageBurst:     pc.WebSocket.Rate.MessageBurst,
		RateBytes:            pc.WebSocket.Rate.BytesPerSecond,
		RateByteBurst:        pc.WebSocket.Rate.ByteBurst,
		RateSlow:             pc.WebSocket.Rate.Action == conf.RateSlow,
		LingerTimeout:        lingerOf(pc.WebSocket.Linger.Std()),
		LingerBytes:          pc.WebSocket.LingerBytes,
		Cookie: proxy.CookieSettings{
			Name:     pc.Cookie.Name,
			Path:     pc.Cookie.Path,
			MaxAge:   pc.Cookie.MaxAge.Std(),
			SameSite: sameSiteOf(pc.Cookie.SameSite),
		},

		// Bounds the backend's answer to the upgrade.
		MaxResponseHeaderBytes: pc.MaxResponseHeaderBytes,
	}
}

// healthOf maps pc's active checks; nil when it has none.
func healthOf(pc *conf.Pool) *health.Options {
	if pc.Health.Type == conf.HealthNone {
		return nil
	}
	return &health.Options{
		Pool:         pc.Name,
		Type:         pc.Health.Type,
		Interval:     pc.Health.Interval.Std(),
		Timeout:      pc.Health.Timeout.Std(),
		Rise:         pc.Health.Rise,
		Fall:         pc.Health.Fall,
		Path:         pc.Health.Path,
		ExpectStatus: pc.Health.ExpectStatus,

		// Bounds the backend's response head, as on the upgrade.
		MaxHeaderBytes: pc.MaxResponseHeaderBytes,
	}
}

func sameSiteOf(s string) http.SameSite {
	switch s {
	case conf.SameSiteStrict:
		return http.SameSiteStrictMode
	case conf.SameSiteNone:
		return http.SameSiteNoneMode
	}
	return http.SameSiteLaxMode
}

// minExcess maps the file's min_excess, where 0 means no floor, onto
// balance's, where 0 means the default.
func minExcess(n int64) int64 {
	if n == 0 {
		return balance.NoMinExcess
	}
	return n
}

// lingerOf maps websocket.linger to proxy.Pool.LingerTimeout, where 0
// means the default and a negative value no lingering.
func lingerOf(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Pool is one running pool: its balancer survives reloads so that
// live connections keep their *Backend and least-connections keeps its
// memory (traefik#13913).
type Pool struct {
	Spec    *Spec
	Bal     *balance.Pool
	Limiter *balance.Limiter
	Admit   *balance.Bucket // kept across reloads while the rate is unchanged
	Proxy   *proxy.Pool

	// What Apply changes on Bal.
	reused bool     // bal was already running
	keys   [][]byte // cookie keys; nil: keep the pool's own
}

// Builder builds running pools: what is new, and what a reload keeps of
// the pools that ran.
type Builder struct {
	// Log receives the settings a reload cannot change until a restart.
	Log *slog.Logger
	// OnEject is every new pool's balance.PoolOptions.OnEject.
	OnEject func(balance.EjectEvent)
	// Fleet, when set, is the fleet layer of the pools of a name
	// (balance.PoolOptions.Fleet), given to every new pool of that name.
	Fleet func(pool string) *balance.Layer
	// Auth maps a pool's token policy onto the proxy's (with the
	// verifier of the providers it names); nil: every pool's is off.
	Auth func(conf.PoolAuth) (*proxy.Auth, error)
}

// New builds the running parts of spec. With old, the pool that
// ran under the same name, it keeps old's balancer (whose build-time
// settings wait for a restart when they changed: balance.Pool.SameSettings),
// and its limiter and admission bucket while their settings are unchanged.
// It changes nothing of old: Apply does, once a reload is sure.
func (b Builder) New(spec *Spec, old *Pool) (*Pool, error) {
	ent := &Pool{Spec: spec, keys: spec.Balance.Cookie.Keys}
	mode := spec.Balance.Mode
	if old != nil {
		ent.Bal, ent.reused = old.Bal, true
		if !old.Bal.SameSettings(spec.Balance) {
			b.Log.Warn("balancing settings of a running pool changed; they take effect on restart", "pool", spec.Name)
		}
		mode = old.Bal.Mode()
		if mode == balance.Cookie && ent.keys == nil && spec.CookieKV == "" {
			b.Log.Warn("cookie secret removed; the running key stays until restart", "pool", spec.Name)
		}
		if old.Spec.Limits.Equal(spec.Limits) {
			ent.Limiter = old.Limiter
		}
		// A bucket running a fleet share is kept only while it stays one.
		if old.Spec.Rate == spec.Rate && old.Spec.Fleet.Rate == spec.Fleet.Rate {
			ent.Admit = old.Admit
		}
	} else {
		if mode == balance.Cookie && ent.keys == nil && spec.CookieKV == "" {
			b.Log.Warn("no cookie secret: stickiness will not survive a restart nor span a fleet", "pool", spec.Name)
		}
		opts := spec.Balance
		opts.OnEject = b.OnEject
		if b.Fleet != nil {
			opts.Fleet = b.Fleet(spec.Name)
		}
		bal, err := balance.NewPool(opts)
		if err != nil {
			return nil, err
		}
		ent.Bal = bal
	}
	if ent.Limiter == nil {
		// Connections admitted by a replaced limiter release into it: the
		// proxy keeps the Pool they were admitted through.
		ent.Limiter = balance.NewLimiter(spec.Limits)
	}
	if ent.Admit == nil {
		ent.Admit = balance.NewBucket(spec.Rate[0], int(spec.Rate[1]), nil)
	}
	px := spec.Proxy
	px.Balancer, px.Limiter, px.Admission = ent.Bal, ent.Limiter, ent.Admit
	if b.Auth != nil {
		a, err := b.Auth(spec.Auth)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		px.Auth = a
	}
	ent.Proxy = &px
	return ent, nil
}

// Build maps the config's pools onto balance pools without touching
// any running pool: the returned entries carry what apply will change
// (members, cookie keys), so a reload that fails later changes nothing.
func (b Builder) Build(cfg *conf.Config, running map[string]*Pool) (map[string]*Pool, error) {
	out := map[string]*Pool{}
	var errs []error
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		spec, err := SpecOf(pc)
		var ent *Pool
		if err == nil {
			ent, err = b.New(spec, running[pc.Name])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", pc.Name, err))
			continue
		}
		out[pc.Name] = ent
	}
	return out, errors.Join(errs...)
}

// Departure is the backends that left one pool in an update.
type Departure struct {
	Pool  string
	Leave conf.BackendLeave
	Left  []*balance.Backend
}

// Apply makes the built entries live: cookie keys and static members.
// It returns the backends the file no longer names, for backendsLeft.
func Apply(pools map[string]*Pool) ([]Departure, error) {
	var errs []error
	var gone []Departure
	for name, ent := range pools {
		if ent.keys != nil && ent.reused {
			if err := ent.Bal.SetCookieKeys(ent.keys); err != nil {
				errs = append(errs, fmt.Errorf("pool %s: %w", name, err))
			}
		}
		if ent.Spec.Static {
			left, err := ent.Bal.UpdateLeft(ent.Spec.Members)
			if err != nil {
				errs = append(errs, fmt.Errorf("pool %s: %w", name, err))
			}
			if len(left) > 0 {
				gone = append(gone, Departure{Pool: name, Leave: ent.Spec.Leave, Left: left})
			}
		}
	}
	return gone, errors.Join(errs...)
}

// Routes are the file's routes to pools.
func Routes(cfg *conf.Config, pools map[string]*Pool) []proxy.Route {
	out := make([]proxy.Route, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		p := pools[r.Pool]
		if p == nil {
			continue // conf.Validate already refused unknown pools
		}
		out = append(out, proxy.Route{Hosts: r.Hosts, PathPrefix: r.PathPrefix, Default: r.Default, Pool: p.Proxy})
	}
	return out
}

// Reused reports whether the balancer ran before this reload (cookie keys
// from Consul are then already on it).
func (p *Pool) Reused() bool { return p.reused }

// FleetPool is the pool as the fleet's shares see it: its limits of fleet
// scope and the parts they set.
func (p *Pool) FleetPool() fleet.Pool {
	lim := p.Spec.Fleet
	return fleet.Pool{
		Name: p.Spec.Name, Pool: p.Bal, Admit: p.Admit,
		MaxConnectionsPerBackend: lim.Conns, ConnectionRate: lim.Rate, ConnectionBurst: lim.Burst,
	}
}

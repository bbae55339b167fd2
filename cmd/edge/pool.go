package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/health"
	"github.com/edgelb/edge/proxy"
)

// poolSpec is one conf.Pool mapped onto the options of balance, proxy and
// health. poolSpecOf is the one place that reads a pool's settings, for the
// file's pools and the pools services declare in the registry alike.
type poolSpec struct {
	name    string
	balance balance.PoolOptions // OnEject is set where the pool is built
	limits  balance.LimiterOptions
	rate    [2]float64 // pool-wide connection rate and burst
	// fleet is the limits of fleet scope, which fleet.Shares shares.
	fleet fleetLimits
	// proxy is the pool's proxy settings; Balancer, Limiter and Admission
	// are set where the pool is built.
	proxy proxy.Pool
	// health is the active checks; nil when there are none. Source,
	// Logger and Observer are set where the checker starts.
	health *health.Options
	leave  conf.BackendLeave // what becomes of a departed backend's connections
	consul conf.PoolConsul
	// cookieKV is the Consul KV entry of the cookie keys, or "".
	cookieKV string
	// static: the members come from the file, not from discovery.
	static  bool
	members []balance.Member
}

// poolSpecOf maps pc. The cookie keys are read here (secret files and
// variables), so a pool whose secret cannot be read is refused.
func poolSpecOf(pc *conf.Pool) (*poolSpec, error) {
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
	s := &poolSpec{
		name: pc.Name,
		balance: balance.PoolOptions{
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
		limits: balance.LimiterOptions{
			MaxConnsPerIP: pc.Limits.MaxConnectionsPerClientIP,
			Rate:          pc.Limits.ConnectionRatePerClientIP,
			Burst:         pc.Limits.ConnectionBurstPerClientIP,
		},
		rate:     [2]float64{pc.Limits.ConnectionRate, float64(pc.Limits.ConnectionBurst)},
		proxy:    proxyPoolOf(pc),
		health:   healthOf(pc),
		leave:    pc.BackendLeave,
		consul:   pc.Consul,
		cookieKV: pc.Cookie.ConsulKey,
		static:   pc.Consul.Service == "",
	}
	if pc.Limits.MaxConnectionsPerBackendScope == conf.ScopeFleet {
		s.fleet.conns = pc.Limits.MaxConnectionsPerBackend
	}
	if pc.Limits.ConnectionRateScope == conf.ScopeFleet {
		s.fleet.rate, s.fleet.burst = pc.Limits.ConnectionRate, pc.Limits.ConnectionBurst
	}
	for _, b := range pc.Backends {
		s.members = append(s.members, balance.Member{ID: b.ID, Addr: b.Address, Weight: b.Weight})
	}
	return s, nil
}

// fleetLimits are a pool's limits of fleet scope; 0 is none.
type fleetLimits struct {
	conns int64   // max_connections_per_backend
	rate  float64 // connection_rate
	burst int     // connection_burst
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

// poolEntry is one running pool: its balancer survives reloads so that
// live connections keep their *Backend and least-connections keeps its
// memory (traefik#13913).
type poolEntry struct {
	spec    *poolSpec
	bal     *balance.Pool
	limiter *balance.Limiter
	admit   *balance.Bucket // kept across reloads while the rate is unchanged
	px      *proxy.Pool

	// What applyPools changes on bal.
	reused bool     // bal was already running
	keys   [][]byte // cookie keys; nil: keep the pool's own
}

// newPoolEntry builds the running parts of spec. With old, the pool that
// ran under the same name, it keeps old's balancer (whose build-time
// settings wait for a restart when they changed: balance.Pool.SameSettings),
// and its limiter and admission bucket while their settings are unchanged.
// It changes nothing of old: applyPools does, once a reload is sure.
func (e *edge) newPoolEntry(spec *poolSpec, old *poolEntry) (*poolEntry, error) {
	ent := &poolEntry{spec: spec, keys: spec.balance.Cookie.Keys}
	mode := spec.balance.Mode
	if old != nil {
		ent.bal, ent.reused = old.bal, true
		if !old.bal.SameSettings(spec.balance) {
			e.log.Warn("balancing settings of a running pool changed; they take effect on restart", "pool", spec.name)
		}
		mode = old.bal.Mode()
		if mode == balance.Cookie && ent.keys == nil && spec.cookieKV == "" {
			e.log.Warn("cookie secret removed; the running key stays until restart", "pool", spec.name)
		}
		if old.spec.limits.Equal(spec.limits) {
			ent.limiter = old.limiter
		}
		// A bucket running a fleet share is kept only while it stays one.
		if old.spec.rate == spec.rate && old.spec.fleet.rate == spec.fleet.rate {
			ent.admit = old.admit
		}
	} else {
		if mode == balance.Cookie && ent.keys == nil && spec.cookieKV == "" {
			e.log.Warn("no cookie secret: stickiness will not survive a restart nor span a fleet", "pool", spec.name)
		}
		opts := spec.balance
		opts.OnEject = e.logEjection
		bal, err := balance.NewPool(opts)
		if err != nil {
			return nil, err
		}
		ent.bal = bal
	}
	if ent.limiter == nil {
		// Connections admitted by a replaced limiter release into it: the
		// proxy keeps the Pool they were admitted through.
		ent.limiter = balance.NewLimiter(spec.limits)
	}
	if ent.admit == nil {
		ent.admit = balance.NewBucket(spec.rate[0], int(spec.rate[1]), nil)
	}
	px := spec.proxy
	px.Balancer, px.Limiter, px.Admission = ent.bal, ent.limiter, ent.admit
	ent.px = &px
	return ent, nil
}

// buildPools maps the config's pools onto balance pools without touching
// any running pool: the returned entries carry what apply will change
// (members, cookie keys), so a reload that fails later changes nothing.
func (e *edge) buildPools(cfg *conf.Config) (map[string]*poolEntry, error) {
	out := map[string]*poolEntry{}
	var errs []error
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		spec, err := poolSpecOf(pc)
		var ent *poolEntry
		if err == nil {
			ent, err = e.newPoolEntry(spec, e.pools[pc.Name])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", pc.Name, err))
			continue
		}
		out[pc.Name] = ent
	}
	return out, errors.Join(errs...)
}

// departure is the backends that left one pool in an update.
type departure struct {
	pool  string
	leave conf.BackendLeave
	left  []*balance.Backend
}

// applyPools makes the built entries live: cookie keys and static members.
// It returns the backends the file no longer names, for backendsLeft.
func applyPools(pools map[string]*poolEntry) ([]departure, error) {
	var errs []error
	var gone []departure
	for name, ent := range pools {
		if ent.keys != nil && ent.reused {
			if err := ent.bal.SetCookieKeys(ent.keys); err != nil {
				errs = append(errs, fmt.Errorf("pool %s: %w", name, err))
			}
		}
		if ent.spec.static {
			left, err := ent.bal.UpdateLeft(ent.spec.members)
			if err != nil {
				errs = append(errs, fmt.Errorf("pool %s: %w", name, err))
			}
			if len(left) > 0 {
				gone = append(gone, departure{pool: name, leave: ent.spec.leave, left: left})
			}
		}
	}
	return gone, errors.Join(errs...)
}

// backendsLeft applies the pool's backend_leave to backends that left it
// for good (removed from the file, gone from Consul or in maintenance
// there; never a failing check): with drain, their clients get close 1012
// spread over the window so they reconnect to the others at a bounded
// rate; with keep, they stay. Either way they count in the gauges until
// they close (balance.Pool.Retired).
func (e *edge) backendsLeft(d departure) {
	for _, b := range d.left {
		if b.Active() <= 0 {
			continue
		}
		if d.leave.Connections == conf.LeaveKeep {
			e.log.Info("backend left the pool; keeping its connections", "pool", d.pool, "backend", b.ID(), "address", b.Addr(), "connections", b.Active())
			continue
		}
		n := e.proxy.CloseBackend(b, d.leave.Window.Std())
		e.log.Info("backend left the pool; closing its connections with 1012", "pool", d.pool, "backend", b.ID(), "address", b.Addr(), "connections", n, "window", d.leave.Window.String())
	}
}

// goneFromRegistry is a discovered pool's discovery.WatcherOptions.OnGone:
// ids left the registry, and their backends, already out of the pool, are
// among its retired ones if they still hold connections. leave is the
// pool's backend_leave when it is not (or no longer) one of the file's.
func (e *edge) goneFromRegistry(pool string, bal *balance.Pool, leave conf.BackendLeave, ids []string) {
	e.mu.Lock()
	if ent := e.pools[pool]; ent != nil {
		leave = ent.spec.leave
	}
	e.mu.Unlock()
	d := departure{pool: pool, leave: leave}
	for _, b := range bal.Retired() {
		if slices.Contains(ids, b.ID()) {
			d.left = append(d.left, b)
		}
	}
	e.backendsLeft(d)
}

// logEjection writes one line per ejection, and one when the cap (or the
// rule that the last available backend stays) first keeps a failing
// backend in.
func (e *edge) logEjection(ev balance.EjectEvent) {
	if ev.Refused {
		e.log.Warn("backend failing but not ejected: ejection cap reached or last available backend",
			"pool", ev.Pool, "backend", ev.Backend.ID(), "address", ev.Backend.Addr(), "reason", ev.Reason,
			"ejected", ev.Ejected, "max_ejected", ev.Max)
		return
	}
	e.log.Warn("backend ejected", "pool", ev.Pool, "backend", ev.Backend.ID(), "address", ev.Backend.Addr(),
		"reason", ev.Reason, "until", ev.Until.UTC().Format(time.RFC3339), "ejected", ev.Ejected, "max_ejected", ev.Max)
}

func routesFor(cfg *conf.Config, pools map[string]*poolEntry) []proxy.Route {
	out := make([]proxy.Route, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		p := pools[r.Pool]
		if p == nil {
			continue // conf.Validate already refused unknown pools
		}
		out = append(out, proxy.Route{Hosts: r.Hosts, PathPrefix: r.PathPrefix, Default: r.Default, Pool: p.px})
	}
	return out
}

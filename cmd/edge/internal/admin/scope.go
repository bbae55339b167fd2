package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/edgelb/edge/balance"
)

// Scope is where a drain, disable, enable or weight acts.
type Scope string

const (
	// ScopeLocal acts on this process's pool until the process ends.
	ScopeLocal Scope = "local"
	// ScopeFleet acts on every edge following the fleet's store (Fleet),
	// and outlives any edge's restart.
	ScopeFleet Scope = "fleet"
)

// Change is what one request changes of a backend's operator setting;
// nil fields are kept.
type Change struct {
	// State is the new operator state, nil to keep it.
	State *balance.AdminState
	// Weight is the new weight override (0: the declared weight), nil to
	// keep it.
	Weight *int
	// Window spreads a drain's close frames.
	Window time.Duration
}

// Fleet is what actions of fleet scope need: the store every edge of the
// fleet follows (cmd/edge gives fleet.Actions).
type Fleet interface {
	// Act applies c to the fleet's setting of the backend, stores it for
	// every edge, and applies it here at once. It returns how many live
	// WebSockets on this edge a drain asked to close.
	Act(ctx context.Context, pool, backend string, c Change) (closing int, err error)
}

// actTimeout bounds one fleet action's round trips to Consul, so an
// operator whose Consul is down gets an answer.
const actTimeout = 10 * time.Second

// scopeOf returns the scope a write asks for: ?scope=local|fleet, else
// the configured default.
func (a *api) scopeOf(r *http.Request) (Scope, error) {
	s := Scope(r.URL.Query().Get("scope"))
	switch s {
	case "":
		s = a.settings.Load().Scope
		if s == "" {
			s = ScopeLocal
		}
	case ScopeLocal, ScopeFleet:
	default:
		return "", Errorf(http.StatusBadRequest, "scope %q: want local or fleet", s)
	}
	if s == ScopeFleet && a.fleet == nil {
		return "", Errorf(http.StatusConflict, "scope fleet needs consul.fleet.prefix, the Consul KV prefix the fleet shares")
	}
	return s, nil
}

// actFleet stores c for the fleet and returns the backend's document with
// the scope, and the closing count for a drain.
func (a *api) actFleet(r *http.Request, p *balance.Pool, b *balance.Backend, c Change) (int, error) {
	ctx, cancel := context.WithTimeout(r.Context(), actTimeout)
	defer cancel()
	n, err := a.fleet.Act(ctx, p.Name(), b.ID(), c)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return 0, Errorf(http.StatusGatewayTimeout, "fleet scope: %v", err)
		}
		// Consul refused or could not be reached: nothing changed.
		return 0, Errorf(http.StatusServiceUnavailable, "fleet scope: %v", err)
	}
	return n, nil
}

// scoped is a backend's document in the answer to a write, with its scope.
type scoped struct {
	backendDoc
	Scope Scope `json:"scope"`
}

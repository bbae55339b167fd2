package balance

import (
	"errors"
	"fmt"
)

// AdminState is what an operator set on a backend at run time, on top of
// what discovery and health checks say (HAProxy's "set server ... state").
type AdminState int32

const (
	// AdminReady leaves the backend to discovery, health and ejection.
	AdminReady AdminState = iota
	// AdminDrain takes no new connections; the caller asks the live ones
	// to close (proxy: close 1012, spread over a window).
	AdminDrain
	// AdminDisabled takes no new connections and leaves the live ones be
	// (HAProxy's "maint" without "shutdown sessions").
	AdminDisabled
)

// String returns the API spelling of s ("ready", "drain", "disabled").
func (s AdminState) String() string {
	switch s {
	case AdminReady:
		return "ready"
	case AdminDrain:
		return "drain"
	case AdminDisabled:
		return "disabled"
	}
	return fmt.Sprintf("AdminState(%d)", int32(s))
}

// AdminStates lists every AdminState, for metrics that initialise each
// state's series.
var AdminStates = []AdminState{AdminReady, AdminDrain, AdminDisabled}

// ErrUnknownBackend is returned by the operator setters for an ID that is
// not a member of the pool.
var ErrUnknownBackend = errors.New("no such backend")

// override is the setting in force on one member ID, the local and
// fleet layers taken together (effective).
type override struct {
	state  AdminState
	weight int64 // 0: the declared weight
}

// AdminState returns what an operator set on the backend.
func (b *Backend) AdminState() AdminState { return AdminState(b.admin.Load()) }

// DeclaredWeight returns the weight the file or discovery gave the member,
// before any operator override.
func (b *Backend) DeclaredWeight() int { return int(b.declared.Load()) }

// WeightOverridden reports whether an operator set the weight.
func (b *Backend) WeightOverridden() bool { return b.override.Load() != 0 }

// applyOverride makes o live on b; declared is the member's own weight.
// Callers hold the pool's writer mutex.
func (b *Backend) applyOverride(o override, declared int64) {
	b.declared.Store(declared)
	b.override.Store(o.weight)
	w := declared
	if o.weight != 0 {
		w = o.weight
	}
	b.weight.Store(w)
	b.admin.Store(int32(o.state))
}

// SetAdminState sets the local operator state of the member id and
// returns its backend. The state outlives membership updates and reloads
// that keep the pool; AdminReady removes it, leaving a fleet's setting in
// force. Pick honours it on the next call.
func (p *Pool) SetAdminState(id string, s AdminState) (*Backend, error) {
	return p.setLocal(id, func(o *Override) { o.State = s })
}

// SetAdminWeight sets the local operator's weight of the member id
// (1..MaxWeight) until it is cleared with 0, whatever discovery later
// declares.
func (p *Pool) SetAdminWeight(id string, w int) (*Backend, error) {
	return p.setLocal(id, func(o *Override) { o.Weight = w })
}

// setLocal edits the local layer's setting on id, a member now.
func (p *Pool) setLocal(id string, f func(o *Override)) (*Backend, error) {
	p.mu.Lock()
	if p.snap.Load().ByID(id) == nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("balance: pool %q: backend %q: %w", p.name, id, ErrUnknownBackend)
	}
	o := p.layers[Local].Get(id)
	p.mu.Unlock()
	f(&o)
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("balance: pool %q: backend %q: %w", p.name, id, err)
	}
	if _, err := p.layers[Local].Set(id, o); err != nil {
		return nil, err
	}
	if b := p.snap.Load().ByID(id); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("balance: pool %q: backend %q: %w", p.name, id, ErrUnknownBackend)
}

// Layer returns the pool's layer of scope s: its own local layer, or the
// fleet layer it was built with (PoolOptions.Fleet).
func (p *Pool) Layer(s Scope) *Layer { return p.layers[s] }

// reapply makes the layers' setting on id live on its member, if any, and
// returns it.
func (p *Pool) reapply(id string) *Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.snap.Load().ByID(id)
	if b != nil {
		b.applyOverride(p.override(id), b.declared.Load())
	}
	return b
}

// override is the setting in force on id. Callers hold mu.
func (p *Pool) override(id string) override {
	return effective(p.layers[Local].Get(id), p.layers[Fleet].Get(id))
}

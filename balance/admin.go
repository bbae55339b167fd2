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

// override is what an operator set on one member ID. It lives in the Pool,
// keyed by ID, so it survives discovery updates, including the member
// leaving and coming back (a new *Backend).
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

// SetAdminState sets the operator state of the member id and returns its
// backend. The state outlives membership updates and reloads that keep the
// pool; AdminReady removes it. Pick honours it on the next call.
func (p *Pool) SetAdminState(id string, s AdminState) (*Backend, error) {
	if s < AdminReady || s > AdminDisabled {
		return nil, fmt.Errorf("balance: pool %q: backend %q: admin state %d unknown", p.name, id, int32(s))
	}
	return p.setOverride(id, func(o *override) { o.state = s })
}

// SetAdminWeight overrides the weight of the member id (1..MaxWeight) until
// it is cleared with 0, whatever discovery later declares.
func (p *Pool) SetAdminWeight(id string, w int) (*Backend, error) {
	if w < 0 || w > MaxWeight {
		return nil, fmt.Errorf("balance: pool %q: backend %q: weight %d out of range 0..%d", p.name, id, w, MaxWeight)
	}
	return p.setOverride(id, func(o *override) { o.weight = int64(w) })
}

func (p *Pool) setOverride(id string, f func(o *override)) (*Backend, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.snap.Load().ByID(id)
	if b == nil {
		return nil, fmt.Errorf("balance: pool %q: backend %q: %w", p.name, id, ErrUnknownBackend)
	}
	o := p.overrides[id]
	f(&o)
	if o == (override{}) {
		delete(p.overrides, id)
	} else {
		p.overrides[id] = o
	}
	b.applyOverride(o, b.declared.Load())
	return b, nil
}

// Override is an operator's setting on one member ID as a whole: its state
// and its weight (0: the declared one). The zero Override is none.
type Override struct {
	State  AdminState
	Weight int
}

// SetOverride replaces the operator's setting on id with o, whether or not
// id is a member now: a member that joins later under that ID starts with
// it, in the snapshot that adds it (a fleet's action, read before
// discovery answered, is never missed by a Pick). The zero Override
// removes it. It returns the member's backend, or nil when id is not a
// member; the caller bounds how many IDs it sets that are not.
func (p *Pool) SetOverride(id string, o Override) (*Backend, error) {
	switch {
	case o.State < AdminReady || o.State > AdminDisabled:
		return nil, fmt.Errorf("balance: pool %q: backend %q: admin state %d unknown", p.name, id, int32(o.State))
	case o.Weight < 0 || o.Weight > MaxWeight:
		return nil, fmt.Errorf("balance: pool %q: backend %q: weight %d out of range 0..%d", p.name, id, o.Weight, MaxWeight)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ov := override{state: o.State, weight: int64(o.Weight)}
	if ov == (override{}) {
		delete(p.overrides, id)
	} else {
		p.overrides[id] = ov
	}
	b := p.snap.Load().ByID(id)
	if b != nil {
		b.applyOverride(ov, b.declared.Load())
	}
	return b, nil
}

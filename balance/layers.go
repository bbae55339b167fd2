package balance

import (
	"fmt"
	"sync"
	"weak"
)

// Scope is whose operator settings an override layer holds.
type Scope uint8

const (
	// Local is this edge's operator: the admin API of local scope.
	Local Scope = iota
	// Fleet is the fleet's operator: actions of fleet scope, which every
	// edge of a fleet applies alike.
	Fleet
	numScopes
)

// String names the scope as the admin API spells it.
func (s Scope) String() string {
	switch s {
	case Local:
		return "local"
	case Fleet:
		return "fleet"
	}
	return fmt.Sprintf("Scope(%d)", uint8(s))
}

// Override is an operator's setting on one member ID as a whole: its state
// and its weight (0: the declared one). The zero Override is none.
type Override struct {
	State  AdminState
	Weight int
}

// check refuses a state or weight no operator may set.
func (o Override) check() error {
	switch {
	case o.State < AdminReady || o.State > AdminDisabled:
		return fmt.Errorf("admin state %d unknown", int32(o.State))
	case o.Weight < 0 || o.Weight > MaxWeight:
		return fmt.Errorf("weight %d out of range 0..%d", o.Weight, MaxWeight)
	}
	return nil
}

// effective is the one statement of the layers' precedence: for the state
// and for the weight alike, the local operator's setting when it has one,
// else the fleet's, else what discovery or the file declared. A state
// other than AdminReady is a setting, so a backend either scope drained
// or disabled is never pickable, and clearing one scope's setting leaves
// the other's in force (the local operator on one edge can still set its
// own state or weight over the fleet's, as HAProxy's runtime API sets one
// server's on one process).
func effective(local, fleet Override) override {
	o := override{state: fleet.State, weight: int64(fleet.Weight)}
	if local.State != AdminReady {
		o.state = local.State
	}
	if local.Weight != 0 {
		o.weight = int64(local.Weight)
	}
	return o
}

// Layer is one scope's settings for the pools of one name, by member ID,
// whether or not the ID is a member now: a member that joins under an ID
// starts with its setting, in the snapshot that adds it. A pool is given
// its layers when it is built (PoolOptions.Fleet; its local layer is its
// own) and reads them whenever its members change, and a layer's change
// reaches every pool built with it: so neither the order of a reload
// (pools built, members given, settings changed) nor a member joining
// later can leave a backend the operator drained pickable, not even for
// a moment. Who writes a layer bounds how many IDs it holds.
type Layer struct {
	mu  sync.Mutex
	set map[string]Override // guarded by mu
	// canary is the layer's canary, or nil (SetCanary). Guarded by mu.
	canary *Canary
	// paused: the scope's operator paused the moves of live connections
	// (SetPaused). Guarded by mu.
	paused bool
	// pools built with the layer; a pool a reload dropped goes with the
	// collector, and its pointer with the next Set.
	pools []weak.Pointer[Pool] // guarded by mu
}

// NewLayer returns an empty layer.
func NewLayer() *Layer { return &Layer{set: map[string]Override{}} }

// Get returns the setting on id; the zero Override when there is none.
func (l *Layer) Get(id string) Override {
	if l == nil {
		return Override{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set[id]
}

// Len is how many IDs have a setting.
func (l *Layer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.set)
}

// Set replaces the setting on id with o (the zero Override removes it) and
// makes it live on the member of that ID in every pool built with the
// layer. It returns the members' backends, one per pool that has one.
func (l *Layer) Set(id string, o Override) ([]*Backend, error) {
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("balance: backend %q: %w", id, err)
	}
	l.mu.Lock()
	if o == (Override{}) {
		delete(l.set, id)
	} else {
		l.set[id] = o
	}
	pools := l.live()
	l.mu.Unlock()
	// Outside the layer's lock: a pool reads its layers under its own.
	var out []*Backend
	for _, p := range pools {
		if b := p.reapply(id); b != nil {
			out = append(out, b)
		}
	}
	return out, nil
}

// live returns the pools built with the layer and still in use, and
// forgets the others. Callers hold mu.
func (l *Layer) live() []*Pool {
	out := make([]*Pool, 0, len(l.pools))
	kept := l.pools[:0]
	for _, w := range l.pools {
		if p := w.Value(); p != nil {
			out = append(out, p)
			kept = append(kept, w)
		}
	}
	clear(l.pools[len(kept):])
	l.pools = kept
	return out
}

// join records p as built with the layer.
func (l *Layer) join(p *Pool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live()
	l.pools = append(l.pools, weak.Make(p))
}

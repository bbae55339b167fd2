package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/edgelb/edge/balance"
)

// ActionVersion is the version of the action format this edge writes
// and the only one it reads: an entry of another version is refused, so an
// edge never acts on an entry it might misread.
const ActionVersion = 1

// Bounds of the operator actions an edge reads from the fleet prefix:
// whoever can write it must not make an edge parse, hold or loop without
// bound.
const (
	// MaxActionBytes bounds one entry's value before it is parsed; a
	// real one is about 150 bytes.
	MaxActionBytes = 1 << 10
	// MaxActions is the most entries an edge reads from the prefix,
	// keys naming its own backends first; the others are ignored and
	// counted as refused, and their last valid value (if any) stays.
	MaxActions = 1024
	// MaxActionWindow is the longest drain window an entry may ask,
	// the admin API's own bound.
	MaxActionWindow = 24 * time.Hour
	// MaxActionsResponse bounds the bytes of one answer on the
	// prefix (ClientOptions.MaxResponseBytes of the client Actions
	// reads with): the keys-only list (thousands of keys fit in it) and one
	// entry, whose value Consul bounds at 512 KiB; an entry over it is
	// refused alone, a key list over it fails the read and the actions in
	// force stay.
	MaxActionsResponse = 4 << 20
)

// Action is an operator's action of fleet scope on one backend, as
// kept in Consul KV at PREFIX/admin/<pool>/<backend id> (both path-escaped):
// every edge following the prefix gives the backend this state and weight.
// The zero state with weight 0 is no action, and is a deleted entry.
type Action struct {
	// Pool and Backend name the backend; they come from the key.
	Pool    string
	Backend string
	// State is what the operator set: ready, drain or disabled.
	State balance.AdminState
	// Weight overrides the declared weight, 1 to balance.MaxWeight; 0
	// keeps the declared one.
	Weight int
	// Window spreads a drain's close frames (1012) on every edge.
	Window time.Duration
	// DrainAt is when the drain began, on the writer's clock, for a drain
	// only: a drain with a new DrainAt asks the backend's live connections
	// to close again; a weight change keeps it.
	DrainAt time.Time
	// At is when the entry was written, on the writer's clock.
	At time.Time
	// By is the id of the edge that wrote it, for the operator.
	By string
}

// fleetActionWire is the JSON of an entry.
type fleetActionWire struct {
	V      int    `json:"v"`
	State  string `json:"state"`
	Weight int    `json:"weight"`
	// Window is a Go duration ("30s"), for the operator reading the entry.
	Window  string     `json:"window,omitempty"`
	DrainAt *time.Time `json:"drain_at,omitempty"`
	At      time.Time  `json:"at"`
	By      string     `json:"by,omitempty"`
}

// None reports whether a leaves the backend to discovery and health: no
// operator state, the declared weight.
func (a Action) None() bool { return a.State == balance.AdminReady && a.Weight == 0 }

// Same reports whether a and b ask the same of the same backend, at the
// same moment (so a drain is the same drain).
func (a Action) Same(b Action) bool {
	return a.Pool == b.Pool && a.Backend == b.Backend && a.State == b.State && a.Weight == b.Weight &&
		a.Window == b.Window && a.DrainAt.Equal(b.DrainAt) && a.At.Equal(b.At) && a.By == b.By
}

// EncodeAction returns the value of a's entry.
func EncodeAction(a Action) ([]byte, error) {
	if err := checkFleetAction(&a); err != nil {
		return nil, err
	}
	w := fleetActionWire{V: ActionVersion, State: a.State.String(), Weight: a.Weight, At: a.At.UTC(), By: a.By}
	if a.State == balance.AdminDrain {
		d := a.DrainAt.UTC()
		w.Window, w.DrainAt = a.Window.String(), &d
	}
	return json.Marshal(w)
}

// DecodeAction parses the value of an entry for pool and backend
// (from its key). It refuses a value longer than MaxActionBytes, of
// another version than ActionVersion, with unknown fields, an
// unknown state, a weight outside 0..balance.MaxWeight, a window outside
// 0..24h, a drain without drain_at (or either on another state), or an
// edge id that is not a short printable name.
func DecodeAction(pool, backend string, v []byte) (Action, error) {
	if len(v) > MaxActionBytes {
		return Action{}, fmt.Errorf("%d bytes, more than %d", len(v), MaxActionBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	var w fleetActionWire
	if err := dec.Decode(&w); err != nil {
		return Action{}, fmt.Errorf("not an action: %w", err)
	}
	if dec.More() {
		return Action{}, errors.New("more than one JSON value")
	}
	if w.V != ActionVersion {
		return Action{}, fmt.Errorf("version %d, want %d", w.V, ActionVersion)
	}
	a := Action{Pool: pool, Backend: backend, Weight: w.Weight, At: w.At, By: w.By}
	if w.DrainAt != nil {
		a.DrainAt = *w.DrainAt
	}
	switch w.State {
	case "ready":
		a.State = balance.AdminReady
	case "drain":
		a.State = balance.AdminDrain
	case "disabled":
		a.State = balance.AdminDisabled
	default:
		return Action{}, fmt.Errorf("state %q: want ready, drain or disabled", w.State)
	}
	if w.Window != "" {
		d, err := time.ParseDuration(w.Window)
		if err != nil {
			return Action{}, fmt.Errorf("window %q: %w", w.Window, err)
		}
		a.Window = d
	}
	if err := checkFleetAction(&a); err != nil {
		return Action{}, err
	}
	return a, nil
}

// checkFleetAction applies the bounds of an entry to a.
func checkFleetAction(a *Action) error {
	switch {
	case a.State < balance.AdminReady || a.State > balance.AdminDisabled:
		return fmt.Errorf("state %d unknown", int32(a.State))
	case a.Weight < 0 || a.Weight > balance.MaxWeight:
		return fmt.Errorf("weight %d out of range 0..%d", a.Weight, balance.MaxWeight)
	case a.Window < 0 || a.Window > MaxActionWindow:
		return fmt.Errorf("window %s out of range 0s..%s", a.Window, MaxActionWindow)
	case a.State != balance.AdminDrain && (a.Window != 0 || !a.DrainAt.IsZero()):
		return fmt.Errorf("window or drain_at on a %s action: only a drain has them", a.State)
	case a.State == balance.AdminDrain && a.DrainAt.IsZero():
		return errors.New("a drain without drain_at")
	case a.At.IsZero():
		return errors.New("no time (at)")
	}
	if err := checkFleetName("pool", a.Pool, false); err != nil {
		return err
	}
	if err := checkFleetName("backend", a.Backend, false); err != nil {
		return err
	}
	return checkFleetName("edge id (by)", a.By, true)
}

// fleetActionsDir is the folder of the actions under a fleet prefix.
func fleetActionsDir(prefix string) string { return prefix + "/admin/" }

// ActionKey returns the KV key of the action on pool and backend
// under prefix: each name path-escaped (RFC 3986 §3.3), so a '/' in a
// backend ID stays in its segment and no name reaches another key.
func ActionKey(prefix, pool, backend string) string {
	return fleetActionsDir(prefix) + url.PathEscape(pool) + "/" + url.PathEscape(backend)
}

// ParseActionKey returns the pool and backend of a key under prefix.
// It refuses keys of another folder, with more or fewer than two segments,
// or whose segments are not in the canonical escaping ActionKey
// writes, so two keys never name one backend.
func ParseActionKey(prefix, key string) (pool, backend string, err error) {
	rest, ok := strings.CutPrefix(key, fleetActionsDir(prefix))
	if !ok {
		return "", "", fmt.Errorf("key %q is not under %q", key, fleetActionsDir(prefix))
	}
	ps, bs, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(bs, "/") {
		return "", "", fmt.Errorf("key %q: want %s<pool>/<backend>", key, fleetActionsDir(prefix))
	}
	if pool, err = url.PathUnescape(ps); err == nil {
		backend, err = url.PathUnescape(bs)
	}
	if err != nil || url.PathEscape(pool) != ps || url.PathEscape(backend) != bs {
		return "", "", fmt.Errorf("key %q: names not path-escaped the way edge writes them", key)
	}
	if err := checkFleetName("pool", pool, false); err != nil {
		return "", "", fmt.Errorf("key %q: %w", key, err)
	}
	if err := checkFleetName("backend", backend, false); err != nil {
		return "", "", fmt.Errorf("key %q: %w", key, err)
	}
	return pool, backend, nil
}

package balance

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
)

// MaxVersionLen bounds a member's version: whoever registers a backend
// writes it.
const MaxVersionLen = 64

// Canary is an operator's split of one pool's connections between the
// backends of one version and the others, as Envoy's weighted clusters and
// Istio's subsets split new requests, with one more thing: the live
// connections can be moved to the same split (Rate), since a WebSocket
// lives for hours and a canary of new connections alone is a canary of a
// sliver of the traffic for most of a day (istio/istio#13908).
//
// Promotion is Share 1 (every new connection, and at Rate every live one,
// to the version), rollback Share 0. The zero Share with no version is
// no canary.
type Canary struct {
	// Version is the canary's version, as its members declare it
	// (Member.Version).
	Version string `json:"version"`
	// Share is the part of new connections the version's backends take,
	// 0 to 1; the rest go to the other backends. Within each side the
	// usual pick (least connections by weight) decides.
	Share float64 `json:"share"`
	// Rate is how many live connections per second the fleet moves (close
	// 1012, the client reconnects through the pick) to bring the live
	// connections to Share; 0 moves none.
	Rate float64 `json:"rate,omitempty"`
}

// MaxCanaryRate bounds Rate: a budget beyond it is a reconnect storm.
const MaxCanaryRate = 10000

// Check refuses a canary no operator may set.
func (c Canary) Check() error {
	switch {
	case c.Version == "":
		return errors.New("canary: a version is required")
	case CheckVersion(c.Version) != nil:
		return fmt.Errorf("canary: %w", CheckVersion(c.Version))
	case math.IsNaN(c.Share) || c.Share < 0 || c.Share > 1:
		return fmt.Errorf("canary: share %v out of range 0..1", c.Share)
	case math.IsNaN(c.Rate) || c.Rate < 0 || c.Rate > MaxCanaryRate:
		return fmt.Errorf("canary: rate %v out of range 0..%d", c.Rate, MaxCanaryRate)
	}
	return nil
}

// CheckVersion refuses a version that is too long or not printable: it is
// shown in /status, metrics labels and logs.
func CheckVersion(v string) error {
	if len(v) > MaxVersionLen {
		return fmt.Errorf("version of %d bytes, more than %d", len(v), MaxVersionLen)
	}
	if strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }) >= 0 {
		return fmt.Errorf("version %q: only printable characters without spaces", v)
	}
	return nil
}

// Version returns the version the member declared ("" when none).
func (b *Backend) Version() string {
	if v := b.version.Load(); v != nil {
		return *v
	}
	return ""
}

// setVersion records v when it changed.
func (b *Backend) setVersion(v string) {
	if b.Version() != v {
		b.version.Store(&v)
	}
}

// SetCanary replaces the layer's canary (nil removes it) in every pool
// built with the layer. The local layer's canary, when set, is the one in
// force, like every other local setting.
func (l *Layer) SetCanary(c *Canary) error {
	if c != nil {
		if err := c.Check(); err != nil {
			return err
		}
		cp := *c
		c = &cp
	}
	l.mu.Lock()
	l.canary = c
	pools := l.live()
	l.mu.Unlock()
	for _, p := range pools {
		p.applyCanary()
	}
	return nil
}

// Canary returns the layer's canary, or nil.
func (l *Layer) Canary() *Canary {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.canary == nil {
		return nil
	}
	c := *l.canary
	return &c
}

// SetPaused pauses (or resumes) the moves of live connections of the
// pools built with the layer: rebalancing and a canary's migration. New
// connections still follow the canary.
func (l *Layer) SetPaused(paused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused = paused
}

// Paused reports whether the layer pauses the moves.
func (l *Layer) Paused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused
}

// MovesPaused reports whether either scope's operator paused the moves of
// the pool's live connections.
func (p *Pool) MovesPaused() bool { return p.layers[Local].Paused() || p.layers[Fleet].Paused() }

// applyCanary makes the layers' canary the pool's.
func (p *Pool) applyCanary() {
	c := p.layers[Local].Canary()
	if c == nil {
		c = p.layers[Fleet].Canary()
	}
	p.canary.Store(c)
}

// Canary returns the canary in force on the pool, or nil.
func (p *Pool) Canary() *Canary {
	if c := p.canary.Load(); c != nil {
		cp := *c
		return &cp
	}
	return nil
}

// CanaryWeight is the weight a canary gives b, out of the pool's
// weights: the version's side holds Share of the pool's weight and the
// other side the rest, each divided among its own backends by their
// weights (slow start included). versionW and otherW are the sums of the
// usable backends' weights on each side. A side that has no usable
// backend leaves the whole weight to the other: serving comes before the
// split. The weights of the usable backends sum to 1.
func CanaryWeight(c *Canary, b *Backend, w, versionW, otherW float64) float64 {
	switch {
	case versionW <= 0 || otherW <= 0:
		return w / (versionW + otherW)
	case b.Version() == c.Version:
		return w * c.Share / versionW
	default:
		return w * (1 - c.Share) / otherW
	}
}

// canaryLeastConn is leastConn with the canary's weights (CanaryWeight):
// power-of-two-choices drawn by them, the less loaded by them winning. A
// backend of the version fills to its share before new connections follow
// Share, and a client moved off the other side (Rate) lands on it. ok is
// false when no backend is usable.
func (p *Pool) canaryLeastConn(s *Snapshot, tried []*Backend, c *Canary) (*Backend, bool) {
	clk := pickClock{cfg: p.cfg}
	var vw, ow float64
	n := 0
	for _, b := range s.Backends {
		if !usable(b, tried) {
			continue
		}
		n++
		if b.Version() == c.Version {
			vw += float64(b.pickWeight(&clk))
		} else {
			ow += float64(b.pickWeight(&clk))
		}
	}
	if n == 0 {
		return nil, false
	}
	weight := func(b *Backend) float64 { return CanaryWeight(c, b, float64(b.pickWeight(&clk)), vw, ow) }
	at := func(r uint64) *Backend {
		x := float64(r>>11) / (1 << 53) // uniform in [0, 1): the weights sum to 1
		var last *Backend
		for _, b := range s.Backends {
			if !usable(b, tried) {
				continue
			}
			if w := weight(b); w > 0 {
				last = b
				if x -= w; x < 0 {
					return b
				}
			}
		}
		return last // rounding
	}
	a := at(p.rand())
	var d *Backend
	for range 4 {
		if d = at(p.rand()); d != a {
			break
		}
	}
	if a == nil {
		return nil, false
	}
	if d == nil || d == a {
		return a, true
	}
	// (d.Active+1)/weight(d) < (a.Active+1)/weight(a), cross-multiplied.
	if float64(d.Active()+1)*weight(a) < float64(a.Active()+1)*weight(d) {
		return d, true
	}
	return a, true
}

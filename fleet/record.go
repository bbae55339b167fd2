package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// RecordVersion is the version of the record format this edge writes
// and the only one it reads: a record of another version is refused (fails
// closed), so an edge never acts on numbers it might misread.
const RecordVersion = 1

// Bounds of what an edge reads from the fleet prefix: whoever can write it
// must not make an edge parse, hold or loop without bound.
const (
	// MaxRecordBytes bounds one record's value before it is parsed.
	MaxRecordBytes = 64 << 10
	// MaxEdges is the most records a fleet snapshot holds; past it the
	// rest are ignored (in key order) and the snapshot says so.
	MaxEdges = 256
	// MaxPools is the most pools one record may list.
	MaxPools = 256
	// MaxBackends is the most backends one pool of a record may list.
	MaxBackends = 4096
	// maxFleetName bounds an edge id, a pool or backend name, an address
	// and a version string.
	maxFleetName = 256
	// maxFleetCount bounds any count in a record: far above what a process
	// can hold, low enough that sums over MaxEdges cannot overflow.
	maxFleetCount = 1 << 40
)

// Record is what one edge publishes about itself under
// <prefix>/edges/<id>: who it is and its load. It is a value: a
// Snapshot hands out copies whose slices must not be modified.
type Record struct {
	// ID names the edge in the fleet (the key's last segment).
	ID string `json:"id"`
	// Address is the edge's advertised admin address.
	Address string `json:"address,omitempty"`
	// Version is edge's version string.
	Version string `json:"version,omitempty"`
	// PID is the edge's process id.
	PID int `json:"pid,omitempty"`
	// Ready is the edge's readiness (/readyz).
	Ready bool `json:"ready"`
	// Connections is every WebSocket the edge holds.
	Connections int64 `json:"connections"`
	// Pools is the load of each pool, sorted by name.
	Pools []PoolLoad `json:"pools,omitempty"`
	// Published is when the edge wrote the record, on its own clock (for
	// display; no decision reads it, clocks differ).
	Published time.Time `json:"published"`
}

// PoolLoad is one pool's load on one edge.
type PoolLoad struct {
	Name string `json:"name"`
	// Rate is the pool's recent rate of new connections, per second.
	Rate float64 `json:"rate"`
	// Shared is true when the pool has a fleet-scope connection limit:
	// Backends then lists every backend with its Claim.
	Shared bool `json:"shared,omitempty"`
	// Backends is each backend's active connections on this edge, sorted
	// by ID.
	Backends []BackendLoad `json:"backends,omitempty"`
	// Subjects are the pool's heavy hitters on this edge, when it has a
	// per-subject limit of fleet scope (subjects.go). An edge that does
	// not know the field refuses the record, as any unknown field.
	Subjects []SubjectLoad `json:"subjects,omitempty"`
}

// BackendLoad is one backend's active connections on one edge.
type BackendLoad struct {
	ID     string `json:"id"`
	Active int64  `json:"active"`
	// Claim is, in a Shared pool, the share of the fleet's limit the edge
	// may hold on this backend: it raises what it enforces only to a claim
	// it has published, so the others can count it.
	Claim int64 `json:"claim,omitempty"`
}

// fleetWire is the record as stored: the version first, so a reader can
// refuse what it does not know.
type fleetWire struct {
	V int `json:"v"`
	Record
}

// EncodeRecord returns r's stored form, versioned. It refuses a
// record that DecodeRecord would refuse, so an edge never publishes
// what the others would drop.
func EncodeRecord(r Record) ([]byte, error) {
	r.Published = r.Published.UTC().Round(time.Millisecond)
	b, err := json.Marshal(fleetWire{V: RecordVersion, Record: r})
	if err != nil {
		return nil, fmt.Errorf("fleet record %q: %w", r.ID, err)
	}
	if _, err := DecodeRecord(b, nil); err != nil {
		return nil, err
	}
	return b, nil
}

// DecodeRecord parses and checks one stored record: at most
// MaxRecordBytes, version RecordVersion, no unknown field, names
// bounded and printable, counts within bounds, pools and backends sorted
// and unique. With known set, pools and backends it does not know are
// dropped (a hostile record can then only name what this edge has).
func DecodeRecord(v []byte, known func(pool, backend string) bool) (Record, error) {
	if len(v) > MaxRecordBytes {
		return Record{}, fmt.Errorf("fleet record: %d bytes, more than %d", len(v), MaxRecordBytes)
	}
	d := json.NewDecoder(bytes.NewReader(v))
	d.DisallowUnknownFields()
	var w fleetWire
	if err := d.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("fleet record: %w", err)
	}
	if d.More() {
		return Record{}, errors.New("fleet record: data after the record")
	}
	if w.V != RecordVersion {
		return Record{}, fmt.Errorf("fleet record: version %d, this edge reads %d", w.V, RecordVersion)
	}
	r := w.Record
	if err := checkFleetRecord(&r); err != nil {
		return Record{}, fmt.Errorf("fleet record %q: %w", r.ID, err)
	}
	if known != nil {
		r.Pools = filterKnown(r.Pools, known)
	}
	return r, nil
}

// checkFleetRecord checks r's fields against the bounds.
func checkFleetRecord(r *Record) error {
	if err := checkFleetName("id", r.ID, false); err != nil {
		return err
	}
	if err := checkFleetName("address", r.Address, true); err != nil {
		return err
	}
	if err := checkFleetName("version", r.Version, true); err != nil {
		return err
	}
	if r.PID < 0 || r.PID > math.MaxInt32 {
		return fmt.Errorf("pid %d out of range", r.PID)
	}
	if r.Connections < 0 || r.Connections > maxFleetCount {
		return fmt.Errorf("connections %d out of range", r.Connections)
	}
	if len(r.Pools) > MaxPools {
		return fmt.Errorf("%d pools, more than %d", len(r.Pools), MaxPools)
	}
	for i := range r.Pools {
		p := &r.Pools[i]
		if err := checkFleetPool(p); err != nil {
			return fmt.Errorf("pool %q: %w", p.Name, err)
		}
		if i > 0 && r.Pools[i-1].Name >= p.Name {
			return fmt.Errorf("pool %q: pools not sorted or repeated", p.Name)
		}
	}
	return nil
}

// checkFleetPool checks one pool of a record.
func checkFleetPool(p *PoolLoad) error {
	if err := checkFleetName("name", p.Name, false); err != nil {
		return err
	}
	if math.IsNaN(p.Rate) || p.Rate < 0 || p.Rate > maxFleetCount {
		return fmt.Errorf("rate %v out of range", p.Rate)
	}
	if len(p.Backends) > MaxBackends {
		return fmt.Errorf("%d backends, more than %d", len(p.Backends), MaxBackends)
	}
	for i, b := range p.Backends {
		if err := checkFleetName("backend", b.ID, false); err != nil {
			return err
		}
		if b.Active < 0 || b.Active > maxFleetCount || b.Claim < 0 || b.Claim > maxFleetCount {
			return fmt.Errorf("backend %q: active %d or claim %d out of range", b.ID, b.Active, b.Claim)
		}
		if i > 0 && p.Backends[i-1].ID >= b.ID {
			return fmt.Errorf("backend %q: backends not sorted or repeated", b.ID)
		}
	}
	return checkSubjects(p.Subjects)
}

// checkFleetName refuses empty (unless optional), long and non-printable
// names: they reach logs and the status page.
func checkFleetName(what, s string, optional bool) error {
	switch {
	case s == "" && !optional:
		return fmt.Errorf("%s is empty", what)
	case len(s) > maxFleetName:
		return fmt.Errorf("%s longer than %d bytes", what, maxFleetName)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\uFFFD' }):
		return fmt.Errorf("%s %q has control or invalid characters", what, s)
	}
	return nil
}

// filterKnown keeps the pools and backends known accepts.
func filterKnown(pools []PoolLoad, known func(pool, backend string) bool) []PoolLoad {
	var out []PoolLoad
	for _, p := range pools {
		if !known(p.Name, "") {
			continue
		}
		q := PoolLoad{Name: p.Name, Rate: p.Rate, Shared: p.Shared, Subjects: p.Subjects}
		for _, b := range p.Backends {
			if known(p.Name, b.ID) {
				q.Backends = append(q.Backends, b)
			}
		}
		out = append(out, q)
	}
	return out
}

// SameLoad reports whether a and b say the same thing, publication time
// aside: an edge publishes only when something changed.
func (r Record) SameLoad(o Record) bool {
	if r.ID != o.ID || r.Address != o.Address || r.Version != o.Version || r.PID != o.PID ||
		r.Ready != o.Ready || r.Connections != o.Connections || len(r.Pools) != len(o.Pools) {
		return false
	}
	for i := range r.Pools {
		p, q := r.Pools[i], o.Pools[i]
		if p.Name != q.Name || p.Rate != q.Rate || p.Shared != q.Shared || !slices.Equal(p.Backends, q.Backends) ||
			!slices.Equal(p.Subjects, q.Subjects) {
			return false
		}
	}
	return true
}

// Pool returns r's load of the named pool.
func (r Record) Pool(name string) (PoolLoad, bool) {
	i, ok := slices.BinarySearchFunc(r.Pools, name, func(p PoolLoad, n string) int { return strings.Compare(p.Name, n) })
	if !ok {
		return PoolLoad{}, false
	}
	return r.Pools[i], true
}

// Active returns p's count of backend id, 0 when it lists none.
func (p PoolLoad) Active(id string) int64 { return p.Backend(id).Active }

// Backend returns p's entry of backend id, zero when it lists none.
func (p PoolLoad) Backend(id string) BackendLoad {
	i, ok := slices.BinarySearchFunc(p.Backends, id, func(b BackendLoad, n string) int { return strings.Compare(b.ID, n) })
	if !ok {
		return BackendLoad{}
	}
	return p.Backends[i]
}

// Held returns what edge holds or may hold of backend id by its record:
// the larger of its count and, in a shared pool, its claim.
func (p PoolLoad) Held(id string) int64 {
	b := p.Backend(id)
	if p.Shared {
		return max(b.Active, b.Claim)
	}
	return b.Active
}

// Snapshot is the fleet as one edge last read it from Consul: every
// live edge's record (an edge's key vanishes with its session, so a dead
// edge is not in it), sorted by ID, and what the reading edge knows of
// their freshness. It is immutable once made: a Load publishes a new
// one for every change, readers load it with one atomic read and must not
// modify its slices. The zero value is an empty fleet never read.
//
// It is what the fleet's /status view and the status page render (every
// edge's id, address, version, pid, readiness, connections and last
// publication) and what fleet-scope limits are computed from.
type Snapshot struct {
	// Self is the ID of the edge that read it.
	Self string `json:"self"`
	// Edges is every record read, sorted by ID; at most MaxEdges.
	Edges []Record `json:"edges"`
	// Refused is how many records were dropped (unreadable, another
	// version, past MaxEdges); Errors holds the first few reasons.
	Refused int      `json:"refused,omitempty"`
	Errors  []string `json:"errors,omitempty"`
	// Index is the Consul index of the answer.
	Index uint64 `json:"index"`
	// Read is when the answer arrived (the reading edge's clock); zero when
	// Consul never answered.
	Read time.Time `json:"read,omitzero"`
}

// Edge returns the record of id.
func (s *Snapshot) Edge(id string) (Record, bool) {
	if s == nil {
		return Record{}, false
	}
	i, ok := slices.BinarySearchFunc(s.Edges, id, func(r Record, n string) int { return strings.Compare(r.ID, n) })
	if !ok {
		return Record{}, false
	}
	return s.Edges[i], true
}

// Size is how many edges the snapshot holds, counting the reading edge
// even before its own record appears: the fleet size shares divide by.
func (s *Snapshot) Size() int {
	if s == nil {
		return 1
	}
	n := len(s.Edges)
	if _, ok := s.Edge(s.Self); !ok {
		n++
	}
	return n
}

// Total returns the sum over the fleet of backend's active connections in
// pool.
func (s *Snapshot) Total(pool, backend string) int64 {
	if s == nil {
		return 0
	}
	var n int64
	for _, r := range s.Edges {
		if p, ok := r.Pool(pool); ok {
			n += p.Active(backend)
		}
	}
	return n
}

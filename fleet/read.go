package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgelb/edge/internal/consul"
	"github.com/hashicorp/consul/api"
)

// Bounds of the fleet load's reads of PREFIX/edges/, beyond those of one
// record (MaxRecordBytes, MaxEdges): whoever can write the
// prefix must not make an edge download, decode or hold without bound,
// however many keys, however large, however often rewritten.
const (
	// MaxKeys is the most keys of the prefix an edge looks at in one
	// read (this edge's own first, then those it read before, then the
	// others in key order); the rest are ignored and counted (Excess).
	MaxKeys = 1024
	// MaxKeysResponse bounds the answer listing the prefix's keys:
	// keys only, no values. A longer list fails the read (the sums turn
	// stale and limits fall back to this edge's share), never grows
	// memory.
	MaxKeysResponse = 1 << 20
	// DefaultReadInterval is the least time between the starts of two
	// reads of the prefix: a writer that changes it without pause wakes
	// an edge at most this often.
	DefaultReadInterval = 250 * time.Millisecond
)

// Why a key of the prefix was refused, counted in LoadStatus.
const (
	refuseOther = iota
	refuseUnheld
	refuseOversized
	refuseExcess
)

// fleetEntry is what the follower last read of one key: the record
// (unfiltered: Known is applied when a snapshot is made, since the pools
// and backends it accepts change) or why the key was refused, as of the
// key's ModifyIndex index (0 when unknown: read again next time).
type fleetEntry struct {
	index uint64
	rec   Record
	err   error
	why   int
}

// fleetReader is the follower's memory between reads, owned by its
// goroutine: what it read of each key, and the refusals it has logged.
type fleetReader struct {
	f       *Load
	dir     string
	entries map[string]fleetEntry
	logged  map[string]string // key -> the refusal last logged
}

func newFleetReader(f *Load) *fleetReader {
	return &fleetReader{f: f, dir: f.opts.Prefix + "/edges/", entries: map[string]fleetEntry{}, logged: map[string]string{}}
}

// forget drops what was read: after an error, Consul may be an agent
// restarted with other indexes, where an index read before may name
// another value.
func (r *fleetReader) forget() { clear(r.entries) }

// fleetCounts are the refusals of one read, by reason, and whether it
// read a record or saw one go (touched).
type fleetCounts struct {
	refused, unheld, oversized, excess int
	touched                            bool
}

// read makes the snapshot of the keys listed at index: keys that are not
// an edge id or past MaxKeys are refused unread, keys no session
// holds are refused unread, keys unchanged since they were read keep what
// was read, and only the others are read, each bounded at
// MaxRecordBytes.
func (r *fleetReader) read(ctx context.Context, keys []string, index uint64, now time.Time) (*Snapshot, fleetCounts, error) {
	keys = slices.Clone(keys)
	slices.Sort(keys) // ids in order, as Snapshot keeps them
	next := make(map[string]fleetEntry, len(keys))
	cand := r.candidates(keys, next)
	checks, err := consul.CheckKeys(ctx, r.f.opts.Client, cand, func(k string) uint64 { return r.entries[k].index })
	if err != nil {
		return nil, fleetCounts{}, fmt.Errorf("fleet load: %w", err)
	}
	fetched := 0
	for i, k := range cand {
		e, seen := r.entries[k]
		switch {
		case seen && checks[i].Unchanged:
			next[k] = e
		case checks[i].Unheld:
			// A record no session holds would never vanish; its value is
			// not read.
			next[k] = fleetEntry{err: errors.New("not bound to a session: not read"), why: refuseUnheld}
		case fetched == MaxEdges:
			next[k] = fleetEntry{err: fmt.Errorf("more than %d changed records in one read: not read", MaxEdges), why: refuseExcess}
		default:
			fetched++
			e, ok, err := r.fetch(ctx, k)
			if err != nil {
				return nil, fleetCounts{}, err
			}
			if ok {
				next[k] = e
			}
		}
	}
	s, n := r.snapshot(keys, next, index, now)
	n.touched = fetched > 0
	for k, e := range r.entries {
		if _, ok := next[k]; !ok && e.err == nil {
			n.touched = true // a record went
		}
	}
	r.log(keys, next)
	for k, e := range next {
		if e.index == 0 {
			delete(next, k) // not read, or of no known index: checked afresh
		}
	}
	r.entries = next
	return s, n, nil
}

// candidates returns the keys to look at, this edge's own first, then
// those read before, then the rest in key order, at most MaxKeys;
// the others are entered in next as refused.
func (r *fleetReader) candidates(keys []string, next map[string]fleetEntry) []string {
	own := r.f.key
	cand := make([]string, 0, min(len(keys), MaxKeys))
	for _, k := range keys {
		id, _ := strings.CutPrefix(k, r.dir)
		if err := checkFleetID(id); err != nil {
			next[k] = fleetEntry{err: fmt.Errorf("not an edge's record: %w: not read", err)}
			continue
		}
		cand = append(cand, k)
	}
	rank := func(k string) int {
		switch e, seen := r.entries[k]; {
		case k == own:
			return 0
		case seen && e.err == nil:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(cand, func(a, b string) int { return rank(a) - rank(b) })
	if len(cand) > MaxKeys {
		for _, k := range cand[MaxKeys:] {
			next[k] = fleetEntry{err: fmt.Errorf("more than %d keys under %q: not read", MaxKeys, r.dir), why: refuseExcess}
		}
		cand = cand[:MaxKeys]
	}
	return cand
}

// fetch reads key, bounded, and decodes it; ok is false when it is gone.
func (r *fleetReader) fetch(ctx context.Context, key string) (e fleetEntry, ok bool, err error) {
	r.f.fetches.Add(1)
	pair, _, err := consul.GetBounded(ctx, r.f.opts.Client, key, MaxRecordBytes, api.QueryOptions{})
	switch {
	case errors.Is(err, consul.ErrResponseTooLarge):
		idx, _ := consul.TooLargeIndex(err)
		return fleetEntry{index: idx, err: fmt.Errorf("value over %d bytes: refused unread", MaxRecordBytes), why: refuseOversized}, true, nil
	case err != nil:
		return fleetEntry{}, false, fmt.Errorf("fleet load: %w", err)
	case pair == nil:
		return fleetEntry{}, false, nil
	case pair.Session == "":
		return fleetEntry{err: errors.New("not bound to a session"), why: refuseUnheld}, true, nil
	}
	e.index = pair.ModifyIndex
	e.rec, e.err = DecodeRecord(pair.Value, nil)
	if id := strings.TrimPrefix(key, r.dir); e.err == nil && e.rec.ID != id {
		e.err = fmt.Errorf("id %q under the key of %q", e.rec.ID, id)
	}
	return e, true, nil
}

// snapshot assembles the records of next in key order (Consul lists keys
// sorted, so by id), at most MaxEdges, each cut to what Known
// accepts.
func (r *fleetReader) snapshot(keys []string, next map[string]fleetEntry, index uint64, now time.Time) (*Snapshot, fleetCounts) {
	s := &Snapshot{Self: r.f.opts.ID, Index: index, Read: now}
	var n fleetCounts
	refuse := func(key string, why int, err error) {
		s.Refused++
		n.refused++
		switch why {
		case refuseUnheld:
			n.unheld++
		case refuseOversized:
			n.oversized++
		case refuseExcess:
			n.excess++
		}
		if len(s.Errors) < maxFleetErrors {
			s.Errors = append(s.Errors, key+": "+err.Error())
		}
	}
	for _, k := range keys {
		e, ok := next[k]
		switch {
		case !ok:
			continue // gone since it was listed
		case e.err != nil:
			refuse(k, e.why, e.err)
			continue
		case len(s.Edges) == MaxEdges:
			refuse(k, refuseExcess, fmt.Errorf("more than %d edges", MaxEdges))
			continue
		}
		rec := e.rec
		if r.f.opts.Known != nil {
			rec.Pools = filterKnown(rec.Pools, r.f.opts.Known)
		}
		s.Edges = append(s.Edges, rec)
	}
	return s, n
}

// maxFleetLogged bounds the refusals one read logs.
const maxFleetLogged = 32

// log logs each refusal once, for as long as it lasts, at most
// maxFleetLogged a read, and forgets keys that are gone or accepted.
func (r *fleetReader) log(keys []string, next map[string]fleetEntry) {
	n := 0
	for _, k := range keys {
		e := next[k]
		if e.err == nil {
			continue
		}
		why := e.err.Error()
		if r.logged[k] == why {
			continue
		}
		if n == maxFleetLogged {
			r.f.opts.Logger.Warn("fleet load: more keys refused; see /status", "prefix", r.dir)
			break
		}
		n++
		r.logged[k] = why
		r.f.opts.Logger.Warn("fleet load: key refused", "key", k, "err", why)
	}
	for k := range r.logged {
		if e, ok := next[k]; !ok || e.err == nil {
			delete(r.logged, k)
		}
	}
}

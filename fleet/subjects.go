package fleet

import (
	"fmt"
	"strconv"
)

// Per-subject connection limits of fleet scope. Publishing every
// subject's count would make Consul's writes grow with the number of
// users; each edge publishes instead, per pool, its heavy hitters: the
// subjects holding at least a threshold of its connections (SubjectSource
// picks them), at most MaxSubjects. An edge counts, for a subject, its own
// live connections plus what the others published: a subject under the
// threshold on another edge is not seen there, so the limit holds to
// within one threshold per edge, and a stale fleet (Consul silent) leaves
// each edge with its own count, the local limit.

// MaxSubjects is the most subjects one pool of a record may list.
const MaxSubjects = 64

// SubjectLoad is one subject's live connections to a pool on one edge:
// the subject by its 64-bit hash (auth.SubjectHash), never its name.
type SubjectLoad struct {
	// Subject is the hash in 16 hex digits.
	Subject string `json:"sub"`
	Conns   int64  `json:"conns"`
}

// SubjectSource is a pool's per-subject counts as the fleet sees them:
// the proxy's, through the edge.
type SubjectSource interface {
	// Heavy lists this edge's heavy hitters of the pool, at most
	// MaxSubjects, sorted by Subject.
	Heavy() []SubjectLoad
	// SetFleet hands the other edges' counts, by subject hash; nil when
	// the fleet's numbers are stale (the local limit alone holds).
	SetFleet(others map[uint64]int64)
}

// SubjectKey is a subject hash's form in a record.
func SubjectKey(h uint64) string { return fmt.Sprintf("%016x", h) }

// checkSubjects checks a pool's subjects in a record: bounded, well
// formed, sorted and unique.
func checkSubjects(ss []SubjectLoad) error {
	if len(ss) > MaxSubjects {
		return fmt.Errorf("%d subjects, more than %d", len(ss), MaxSubjects)
	}
	for i, s := range ss {
		if _, err := strconv.ParseUint(s.Subject, 16, 64); err != nil || len(s.Subject) != 16 {
			return fmt.Errorf("subject %q is not 16 hex digits", s.Subject)
		}
		if s.Conns < 0 || s.Conns > maxFleetCount {
			return fmt.Errorf("subject %s: conns %d out of range", s.Subject, s.Conns)
		}
		if i > 0 && ss[i-1].Subject >= s.Subject {
			return fmt.Errorf("subject %s: subjects not sorted or repeated", s.Subject)
		}
	}
	return nil
}

// othersSubjects sums, for pool, the subjects the other edges published.
func (s *Snapshot) othersSubjects(pool string) map[uint64]int64 {
	out := map[uint64]int64{}
	if s == nil {
		return out
	}
	for _, r := range s.Edges {
		if r.ID == s.Self {
			continue
		}
		p, ok := r.Pool(pool)
		if !ok {
			continue
		}
		for _, sl := range p.Subjects {
			if h, err := strconv.ParseUint(sl.Subject, 16, 64); err == nil {
				out[h] += sl.Conns
			}
		}
	}
	return out
}

// applySubjects hands every pool with a SubjectSource the others' counts,
// or nil when the fleet's numbers are stale.
func applySubjects(st LoadStatus, snap *Snapshot, pools []Pool) {
	for _, p := range pools {
		if p.Subjects == nil {
			continue
		}
		if st.Stale {
			p.Subjects.SetFleet(nil)
			continue
		}
		p.Subjects.SetFleet(snap.othersSubjects(p.Name))
	}
}

// withSubjects fills the heavy hitters into the loads of the pools that
// have a SubjectSource.
func withSubjects(loads []PoolLoad, pools []Pool) []PoolLoad {
	for _, p := range pools {
		if p.Subjects == nil {
			continue
		}
		for i := range loads {
			if loads[i].Name == p.Name {
				loads[i].Subjects = p.Subjects.Heavy()
			}
		}
	}
	return loads
}

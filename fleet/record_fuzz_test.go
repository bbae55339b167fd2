package fleet

import (
	"strings"
	"testing"
)

// FuzzDecodeRecord: whatever a writer of the fleet prefix puts in an
// edge's record, decoding never panics, and what it accepts is within the
// bounds, names only what the reader knows, and survives a round trip.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"v":1,"id":"a","ready":true,"connections":3,"pools":[{"name":"app","rate":1.5,"backends":[{"id":"b1","active":2},{"id":"b2","active":1}]}],"published":"2026-12-02T00:00:00Z"}`))
	f.Add([]byte(`{"v":2,"id":"a","ready":true,"connections":3,"published":"2026-12-02T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"id":"a","connections":-1,"published":"2026-12-02T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"id":"a","pools":[{"name":"app","backends":[{"id":"b2","active":1},{"id":"b1","active":1}]}],"published":"2026-12-02T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"id":"a","extra":1}`))
	f.Add([]byte(`{"v":1,"id":"a"} {}`))
	f.Add([]byte(`{"v":1,"id":"a\u0000"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, v []byte) {
		known := func(pool, backend string) bool {
			return pool == "app" && (backend == "" || strings.HasPrefix(backend, "b"))
		}
		r, err := DecodeRecord(v, known)
		if err != nil {
			return
		}
		if r.ID == "" || r.Connections < 0 || len(r.Pools) > MaxPools {
			t.Fatalf("accepted %+v", r)
		}
		for _, p := range r.Pools {
			if p.Name != "app" || p.Rate < 0 || len(p.Backends) > MaxBackends {
				t.Fatalf("accepted pool %+v", p)
			}
			for _, b := range p.Backends {
				if !strings.HasPrefix(b.ID, "b") || b.Active < 0 || b.Active > maxFleetCount {
					t.Fatalf("accepted backend %+v", b)
				}
			}
		}
		enc, err := EncodeRecord(r)
		if err != nil {
			t.Fatalf("an accepted record does not encode: %v", err)
		}
		back, err := DecodeRecord(enc, known)
		if err != nil || !back.SameLoad(r) {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, r)
		}
	})
}

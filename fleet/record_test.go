package fleet

import (
	"strings"
	"testing"
	"time"
)

func testRecord() Record {
	return Record{ID: "edge-a", Address: "127.0.0.1:9000", Version: "v1", PID: 42, Ready: true, Connections: 5,
		Pools:     []PoolLoad{{Name: "app", Rate: 2.5, Backends: []BackendLoad{{ID: "b1", Active: 3}, {ID: "b2", Active: 2}}}},
		Published: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
}

// TestFleetRecordRoundTrip: what an edge writes, another reads back the
// same, and the sums of a snapshot add the edges up.
func TestFleetRecordRoundTrip(t *testing.T) {
	r := testRecord()
	v, err := EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(v), `{"v":1,`) {
		t.Fatalf("record does not start with its version: %s", v)
	}
	got, err := DecodeRecord(v, nil)
	if err != nil || !got.SameLoad(r) || !got.Published.Equal(r.Published) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
	}
	o := r
	o.ID = "edge-b"
	s := &Snapshot{Self: "edge-c", Edges: []Record{r, o}}
	if n := s.Total("app", "b1"); n != 6 {
		t.Fatalf("fleet total of b1 %d, want 6", n)
	}
	if n := s.Size(); n != 3 {
		t.Fatalf("fleet size %d, want 3 (two records and the reader)", n)
	}
}

// TestFleetRecordRefusals: what DecodeRecord refuses, and that a
// record naming pools and backends this edge does not have keeps only
// those it has.
func TestFleetRecordRefusals(t *testing.T) {
	for name, v := range map[string]string{
		"other version":  `{"v":2,"id":"a","ready":true,"connections":0,"published":"2026-12-02T00:00:00Z"}`,
		"no version":     `{"id":"a","ready":true,"connections":0,"published":"2026-12-02T00:00:00Z"}`,
		"unknown field":  `{"v":1,"id":"a","ready":true,"connections":0,"limit":9,"published":"2026-12-02T00:00:00Z"}`,
		"negative count": `{"v":1,"id":"a","ready":true,"connections":0,"pools":[{"name":"app","rate":0,"backends":[{"id":"b1","active":-5}]}],"published":"2026-12-02T00:00:00Z"}`,
		"huge count":     `{"v":1,"id":"a","ready":true,"connections":9223372036854775807,"published":"2026-12-02T00:00:00Z"}`,
		"repeated":       `{"v":1,"id":"a","ready":true,"connections":0,"pools":[{"name":"app","rate":0,"backends":[{"id":"b1","active":1},{"id":"b1","active":1}]}],"published":"2026-12-02T00:00:00Z"}`,
		"empty id":       `{"v":1,"id":"","ready":true,"connections":0,"published":"2026-12-02T00:00:00Z"}`,
		"trailing":       `{"v":1,"id":"a","ready":true,"connections":0,"published":"2026-12-02T00:00:00Z"}{}`,
		"too large":      `{"v":1,"id":"a","version":"` + strings.Repeat("x", MaxRecordBytes) + `"}`,
	} {
		if _, err := DecodeRecord([]byte(v), nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := testRecord()
	r.Pools = append([]PoolLoad{{Name: "admin", Backends: []BackendLoad{{ID: "x", Active: 1}}}}, r.Pools...)
	r.Pools[1].Backends = append(r.Pools[1].Backends, BackendLoad{ID: "evil", Active: 1000})
	v, err := EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRecord(v, func(pool, backend string) bool {
		return pool == "app" && (backend == "" || backend == "b1" || backend == "b2")
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pools) != 1 || got.Pools[0].Name != "app" || len(got.Pools[0].Backends) != 2 || got.Pools[0].Active("evil") != 0 {
		t.Fatalf("filtered record %+v", got.Pools)
	}
}

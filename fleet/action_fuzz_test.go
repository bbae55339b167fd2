package fleet

import (
	"testing"

	"github.com/edgelb/edge/balance"
)

// FuzzDecodeAction: whatever a writer of the fleet prefix puts in an
// action's key and value, parsing never panics, and what it accepts is
// within the bounds (a known state, a weight in range, a window of a drain
// only, at most 24h), names the backend of its own key, and survives a
// round trip through the key and the value edge writes.
func FuzzDecodeAction(f *testing.F) {
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"drain","weight":0,"window":"30s","drain_at":"2026-12-02T00:00:00Z","at":"2026-12-02T00:00:00Z","by":"edge-b"}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"disabled","weight":5,"at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/consul:chat/10.0.0.1%2F9000", []byte(`{"v":1,"state":"ready","weight":1000000,"at":"2026-12-02T00:00:00.123456789Z"}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":2,"state":"drain","drain_at":"2026-12-02T00:00:00Z","at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"drain","weight":1000001,"at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"drain","window":"-1s","at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"ready","window":"1s","at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"maint","at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"drain","at":"2026-12-02T00:00:00Z","extra":true}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"drain","at":"2026-12-02T00:00:00Z"} {}`))
	f.Add("edge/admin/app/b1", []byte(`{"v":1,"state":"drain"}`))
	f.Add("edge/admin/app/b1/x", []byte(`{"v":1,"state":"drain","at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/b%2f1", []byte(`{"v":1,"state":"drain","at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/%00", []byte(`{"v":1,"state":"drain","at":"2026-12-02T00:00:00Z"}`))
	f.Add("edge/admin/app/", []byte(`null`))
	f.Add("edge/edges/a", []byte(`{"v":1,"id":"a"}`))
	f.Fuzz(func(t *testing.T, key string, v []byte) {
		pool, backend, err := ParseActionKey("edge", key)
		if err != nil {
			return
		}
		if ActionKey("edge", pool, backend) != key {
			t.Fatalf("key %q parsed as %q %q, which is written %q", key, pool, backend, ActionKey("edge", pool, backend))
		}
		a, err := DecodeAction(pool, backend, v)
		if err != nil {
			return
		}
		switch {
		case len(v) > MaxActionBytes,
			a.State != balance.AdminReady && a.State != balance.AdminDrain && a.State != balance.AdminDisabled,
			a.Weight < 0 || a.Weight > balance.MaxWeight,
			a.Window < 0 || a.Window > MaxActionWindow,
			a.State != balance.AdminDrain && (a.Window != 0 || !a.DrainAt.IsZero()),
			a.State == balance.AdminDrain && a.DrainAt.IsZero(),
			a.Pool != pool || a.Backend != backend, a.At.IsZero():
			t.Fatalf("accepted %+v from %q", a, v)
		}
		enc, err := EncodeAction(a)
		if err != nil {
			t.Fatalf("an accepted action does not encode: %v", err)
		}
		back, err := DecodeAction(pool, backend, enc)
		if err != nil || !back.Same(a) {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, a)
		}
	})
}

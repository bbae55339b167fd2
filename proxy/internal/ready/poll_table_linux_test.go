package ready

import "testing"

// TestPollerTable checks the poller's table of connections: an id finds
// its connection from either side's event, a forgotten id finds nothing,
// even once its slot holds another connection, and forgetting it again
// leaves that other connection alone.
func TestPollerTable(t *testing.T) {
	p := &poller{}
	add := func() (*Conn, uint64) {
		c := NewConn(nil, -1, -1)
		id := p.add(c)
		c.id.Store(id)
		return c, id
	}
	a, ida := add()
	b, idb := add()
	if ida == 0 || ida&1 != 0 || idb == ida {
		t.Fatalf("ids %#x and %#x", ida, idb)
	}
	for _, id := range []uint64{ida, ida | 1} {
		if got := p.lookup(id); got != a {
			t.Errorf("lookup(%#x) = %p, want %p", id, got, a)
		}
	}
	p.forget(ida)
	if got := p.lookup(ida); got != nil {
		t.Errorf("forgotten id %#x found %p", ida, got)
	}
	c, idc := add() // takes a's slot
	if idc == ida {
		t.Fatalf("id %#x given again", ida)
	}
	p.forget(ida)
	for id, want := range map[uint64]*Conn{ida: nil, ida | 1: nil, idb: b, idc: c, idc | 1: c, 0: nil, 1 << 40: nil} {
		if got := p.lookup(id); got != want {
			t.Errorf("lookup(%#x) = %p, want %p", id, got, want)
		}
	}
	if len(p.conns) != 2 {
		t.Errorf("table of %d slots for 2 connections", len(p.conns))
	}
}

package sockets

import "testing"

func TestConnBudget(t *testing.T) {
	for _, tc := range []struct {
		nofile, maxConns int64
		derived          bool
		conns, sockets   int64
	}{
		{nofile: 200, derived: true, conns: 36, sockets: 36},
		{nofile: 1 << 20, derived: true, conns: (1<<20 - 128) / 2, sockets: (1<<20 - 128) / 2},
		{nofile: 1128, maxConns: 100, conns: 100, sockets: 900},   // spare descriptors go to sockets without a backend
		{nofile: 1128, maxConns: 5000, conns: 5000, sockets: 500}, // more than the limit holds: sockets keep half
		{nofile: 1128, maxConns: 0, conns: 0, sockets: 500},       // unlimited: still capped by descriptors
		{nofile: 100, derived: true, conns: 1, sockets: 1},        // tiny limits still admit one
		{nofile: 0, maxConns: 7, conns: 7, sockets: 0},            // unknown limit: no cap
	} {
		conns, sockets := ConnBudget(tc.nofile, tc.maxConns, tc.derived)
		if conns != tc.conns || sockets != tc.sockets {
			t.Errorf("ConnBudget(%d, %d, %v) = %d, %d; want %d, %d", tc.nofile, tc.maxConns, tc.derived, conns, sockets, tc.conns, tc.sockets)
		}
	}
}

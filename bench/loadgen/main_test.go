package main

import (
	"net/netip"
	"testing"
)

func TestAddAddr(t *testing.T) {
	tests := []struct {
		base string
		n    int
		want string
	}{
		{"127.0.0.2", 0, "127.0.0.2"},
		{"127.0.0.2", 253, "127.0.0.255"},
		{"127.0.0.2", 254, "127.0.1.0"},
		{"127.0.0.2", 800, "127.0.3.34"},
	}
	for _, tt := range tests {
		if got := addAddr(netip.MustParseAddr(tt.base), tt.n); got.String() != tt.want {
			t.Errorf("addAddr(%s, %d) = %s, want %s", tt.base, tt.n, got, tt.want)
		}
	}
}

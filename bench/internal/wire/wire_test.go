package wire

import (
	"net/netip"
	"testing"
)

func TestSourceAddr(t *testing.T) {
	tests := []struct {
		base string
		i    int
		want string
	}{
		{"127.0.0.2", 0, "127.0.0.2"},
		{"127.0.0.2", 253, "127.0.0.255"},
		{"127.0.0.2", 254, "127.0.1.0"},
		{"127.0.0.2", 800, "127.0.3.34"},
	}
	for _, tt := range tests {
		if got := SourceAddr(netip.MustParseAddr(tt.base), tt.i); got.String() != tt.want {
			t.Errorf("SourceAddr(%s, %d) = %s, want %s", tt.base, tt.i, got, tt.want)
		}
	}
}

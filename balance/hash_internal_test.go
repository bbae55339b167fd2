package balance

import (
	"net/netip"
	"testing"
)

// TestHashGolden pins the hash functions behind client-IP affinity: every
// edge of a fleet, on any platform and release, must compute these values.
func TestHashGolden(t *testing.T) {
	tests := []struct {
		name string
		got  uint64
		want uint64
	}{
		{"fnv1a64 empty", fnv1a64(""), 0xcbf29ce484222325},
		{"fnv1a64 a", fnv1a64("a"), 0xaf63dc4c8601ec8c}, // FNV reference vector
		{"fnv1a64 foobar", fnv1a64("foobar"), 0x85944171f73967e8},
		{"splitmix64 0", splitmix64(0), 0xe220a8397b1dcdaf}, // SplitMix64 reference output
		{"hashID b00", hashID("b00"), 0x5a93cf7345cd79d1},
		{"hashAddr 192.0.2.1", hashAddr(netip.MustParseAddr("192.0.2.1")), 0x0e18af312c09ecfe},
		{"hashAddr mapped", hashAddr(netip.MustParseAddr("::ffff:192.0.2.1")), 0x0e18af312c09ecfe},
		{"hashAddr 2001:db8::1", hashAddr(netip.MustParseAddr("2001:db8::1")), 0xd4eec86219ec625a},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %#x, want %#x", tt.got, tt.want)
			}
		})
	}
}

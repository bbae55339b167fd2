package sockets

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:80", "127.0.0.1:80", true},
		{"127.0.0.1:80", "127.0.0.1:81", false},
		{"127.0.0.1:80", "127.0.0.2:80", false},
		{"0.0.0.0:80", "127.0.0.1:80", true},
		{"[::]:80", "127.0.0.1:80", true}, // Go listens on a wildcard in dual stack
		{"[::1]:80", "127.0.0.1:80", false},
		{"[::ffff:127.0.0.1]:80", "127.0.0.1:80", true},
	} {
		a, b := netip.MustParseAddrPort(tc.a), netip.MustParseAddrPort(tc.b)
		if got := Overlap(a, b); got != tc.want {
			t.Errorf("Overlap(%s, %s) = %v, want %v", a, b, got, tc.want)
		}
	}
}

// FuzzResolve: the address parser never panics and, for literal
// addresses (no lookup: the context is done), keeps the port.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:8443", ":443", "[::1]:80", "localhost:80", // the listener forms of conf
		"0.0.0.0:0", "[::ffff:10.0.0.1]:1", "127.0.0.1:65536", "127.0.0.1:-1", "[fe80::1%eth0]:80", "nocolon", "a:b:c",
	} {
		f.Add(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := Resolve(ctx, s)
		if err != nil {
			return
		}
		if again, err := Resolve(ctx, ap.String()); err != nil || again != ap {
			t.Fatalf("%q resolved to %s, which resolves to %s, %v", s, ap, again, err)
		}
	})
}

// TestClashes: two addresses that bind one socket are reported at the
// later one, with both named; an address that does not resolve is reported
// where it is; port 0 never clashes.
func TestClashes(t *testing.T) {
	got := Clashes(context.Background(), []Bind{
		{"listeners[0].address", "127.0.0.1:8080"},
		{"listeners[1].address", "127.0.0.1:0"},
		{"listeners[2].address", "nocolon"},
		{"listeners[3].address", "127.0.0.1:0"},
		{"admin.address", "0.0.0.0:8080"},
		{"other", "127.0.0.2:8081"},
	})
	if len(got) != 2 {
		t.Fatalf("problems %v, want 2", got)
	}
	if got[0].Where != "listeners[2].address" {
		t.Errorf("first problem at %s, want the unresolvable listeners[2].address", got[0].Where)
	}
	if got[1].Where != "admin.address" || !strings.Contains(got[1].Err.Error(), "same socket as listeners[0].address 127.0.0.1:8080") {
		t.Errorf("second problem %s: %v; want admin.address clashing with listeners[0]", got[1].Where, got[1].Err)
	}
}

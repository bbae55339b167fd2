package main

import (
	"context"
	"net/netip"
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
		if got := overlap(a, b); got != tc.want {
			t.Errorf("overlap(%s, %s) = %v, want %v", a, b, got, tc.want)
		}
	}
}

// FuzzResolveListen: the address parser never panics and, for literal
// addresses (no lookup: the context is done), keeps the port.
func FuzzResolveListen(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:8443", ":443", "[::1]:80", "localhost:80", // the listener forms of conf
		"0.0.0.0:0", "[::ffff:10.0.0.1]:1", "127.0.0.1:65536", "127.0.0.1:-1", "[fe80::1%eth0]:80", "nocolon", "a:b:c",
	} {
		f.Add(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := resolveListen(ctx, s)
		if err != nil {
			return
		}
		if again, err := resolveListen(ctx, ap.String()); err != nil || again != ap {
			t.Fatalf("%q resolved to %s, which resolves to %s, %v", s, ap, again, err)
		}
	})
}

package discovery

import (
	"net"
	"testing"
)

func TestAdvertisedAndCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		bound       string
		host, check string
		port        int
	}{
		{"0.0.0.0:8443", "", "127.0.0.1:8443", 8443},
		{"[::]:8443", "", "127.0.0.1:8443", 8443},
		{"10.1.2.3:80", "10.1.2.3", "10.1.2.3:80", 80},
		{"[::ffff:10.1.2.3]:80", "10.1.2.3", "10.1.2.3:80", 80},
		{"[2001:db8::1]:9100", "2001:db8::1", "[2001:db8::1]:9100", 9100},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.bound)
		if err != nil {
			t.Fatal(err)
		}
		host, port := Advertised(a)
		if host != tc.host || port != tc.port {
			t.Errorf("Advertised(%s) = %q, %d; want %q, %d", tc.bound, host, port, tc.host, tc.port)
		}
		if got := CheckAddr(a); got != tc.check {
			t.Errorf("CheckAddr(%s) = %q, want %q", tc.bound, got, tc.check)
		}
	}
}

func TestServiceIDPart(t *testing.T) {
	for in, want := range map[string]string{
		"host-1":              "host-1",
		"web.example_1":       "web.example_1",
		"host-127.0.0.1:9901": "host-127.0.0.1-9901",
		"a/b?c#d e":           "a-b-c-d-e",
		"ünïcode":             "-n-code",
	} {
		if got := ServiceIDPart(in); got != want {
			t.Errorf("ServiceIDPart(%q) = %q, want %q", in, got, want)
		}
	}
}

package discovery

import (
	"net"
	"testing"
	"time"
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

// TestSelfRegistrations: the public listener is checked on the admin
// /readyz, the metrics endpoint on its own /healthz; a wildcard bind is
// announced as the node's address and checked on loopback; the default
// instance is the host and admin address, kept to what an ID may hold.
func TestSelfRegistrations(t *testing.T) {
	addr := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	regs := SelfRegistrations(SelfOptions{
		Service: "edge", MetricsService: "edge-metrics", Host: "box",
		Public: addr("0.0.0.0:8443"), Admin: addr("127.0.0.1:9901"), Metrics: addr("10.0.0.5:9100"),
	})
	if len(regs) != 2 {
		t.Fatalf("%d registrations, want 2", len(regs))
	}
	pub, m := regs[0], regs[1]
	if pub.Service != "edge" || pub.ID != "edge-box-127.0.0.1-9901" || pub.Address != "" || pub.Port != 8443 ||
		pub.CheckURL != "http://127.0.0.1:9901/readyz" || pub.Meta["instance"] != "box-127.0.0.1-9901" {
		t.Errorf("public registration %+v", pub)
	}
	if m.Service != "edge-metrics" || m.ID != "edge-metrics-box-127.0.0.1-9901" || m.Address != "10.0.0.5" || m.Port != 9100 ||
		m.CheckURL != "http://10.0.0.5:9100/healthz" {
		t.Errorf("metrics registration %+v", m)
	}
	// The metrics target must outlive EdgeDown's minute; the public one
	// goes sooner.
	if pub.DeregisterAfter >= m.DeregisterAfter || m.DeregisterAfter <= time.Minute {
		t.Errorf("deregister after: public %v, metrics %v", pub.DeregisterAfter, m.DeregisterAfter)
	}
	regs = SelfRegistrations(SelfOptions{Service: "edge", MetricsService: "edge-metrics", Instance: "edge a/1",
		Public: addr("127.0.0.1:1"), Admin: addr("127.0.0.1:2"), Metrics: addr("127.0.0.1:2")})
	if regs[0].ID != "edge-edge-a-1" || regs[1].ID != "edge-metrics-edge-a-1" {
		t.Errorf("IDs %q, %q from an explicit instance", regs[0].ID, regs[1].ID)
	}
}

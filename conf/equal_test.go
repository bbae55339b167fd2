package conf

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// fullListener sets every field of a Listener to a value other than its
// zero value.
func fullListener() Listener {
	p := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	return Listener{
		Name: "public", Address: "127.0.0.1:8443",
		TLS: &TLS{
			Certificates:     []Certificate{{CertFile: "c.pem", KeyFile: "k.pem", IssuerFile: "i.pem"}},
			MinVersion:       "1.3",
			Curves:           []string{"X25519", "P-256"},
			ClientCAFile:     "ca.pem",
			ClientCertHeader: "X-Client-Cert",
			SessionTickets:   SessionTickets{Enabled: true, RotateEvery: Duration(time.Hour), Keep: 3, KeyFile: "t.key", ConsulKey: "edge/tickets"},
			OCSP:             OCSP{Enabled: true, MustStaple: "refuse", ConsulPrefix: "edge/ocsp"},
		},
		ProxyProtocol:       ProxyProtocol{Enabled: true, Trusted: p, Timeout: Duration(time.Second)},
		TrustedProxies:      p,
		ForwardedHeader:     true,
		StrictSNIHost:       true,
		ReadHeaderTimeout:   Duration(time.Second),
		TLSHandshakeTimeout: Duration(2 * time.Second),
		ReadBodyTimeout:     Duration(3 * time.Second),
		MaxHeaderBytes:      4096,
	}
}

// TestListenerEqualSeesEveryField changes every leaf field of a Listener
// in turn, through reflection, and requires Equal to see each change: a
// field added to Listener or its parts without Equal comparing it fails
// here.
func TestListenerEqualSeesEveryField(t *testing.T) {
	if !fullListener().Equal(fullListener()) {
		t.Fatal("a listener is not Equal to a copy of itself")
	}
	n := 0
	var walk func(path string, get func(*Listener) reflect.Value)
	walk = func(path string, get func(*Listener) reflect.Value) {
		full := fullListener()
		v := get(&full)
		switch {
		case v.Kind() == reflect.Pointer:
			walk(path, func(l *Listener) reflect.Value { return get(l).Elem() })
			// nil against set.
			l := fullListener()
			get(&l).Set(reflect.Zero(v.Type()))
			check(t, path+"=nil", l)
			n++
		case v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(netip.Prefix{}):
			for i := range v.NumField() {
				walk(path+"."+v.Type().Field(i).Name, func(l *Listener) reflect.Value { return get(l).Field(i) })
			}
		case v.Kind() == reflect.Slice:
			// One element fewer, and the first element changed.
			l := fullListener()
			get(&l).Set(get(&l).Slice(0, 0))
			check(t, path+"[:0]", l)
			elem := v.Index(0)
			if elem.Kind() == reflect.Struct && elem.Type() != reflect.TypeOf(netip.Prefix{}) {
				for i := range elem.NumField() {
					walk(path+"[0]."+elem.Type().Field(i).Name, func(l *Listener) reflect.Value {
						s := get(l)
						c := reflect.MakeSlice(s.Type(), s.Len(), s.Len())
						reflect.Copy(c, s)
						s.Set(c) // no sharing with other copies
						return s.Index(0).Field(i)
					})
				}
			} else {
				l := fullListener()
				s := get(&l)
				c := reflect.MakeSlice(s.Type(), s.Len(), s.Len())
				if elem.Kind() == reflect.String {
					c.Index(0).SetString(elem.String() + "x")
				} else {
					c.Index(0).Set(reflect.ValueOf(netip.MustParsePrefix("192.168.0.0/16")))
				}
				s.Set(c)
				check(t, path+"[0]", l)
			}
			n++
		default:
			l := fullListener()
			f := get(&l)
			switch f.Kind() {
			case reflect.String:
				f.SetString(f.String() + "x")
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Int, reflect.Int64:
				f.SetInt(f.Int() + 1)
			default:
				t.Fatalf("%s: kind %s not covered by this test", path, f.Kind())
			}
			check(t, path, l)
			n++
		}
	}
	walk("Listener", func(l *Listener) reflect.Value { return reflect.ValueOf(l).Elem() })
	if n < 20 {
		t.Fatalf("only %d fields changed; the walk is broken", n)
	}
}

func check(t *testing.T, what string, l Listener) {
	t.Helper()
	if l.Equal(fullListener()) || fullListener().Equal(l) {
		t.Errorf("%s changed, but Equal still reports the listeners equal", what)
	}
}

// TestListenersEqual: the same listeners in the same order are equal; an
// empty list and an absent one are the same.
func TestListenersEqual(t *testing.T) {
	a, b := fullListener(), fullListener()
	b.Name = "other"
	if !ListenersEqual([]Listener{a, b}, []Listener{fullListener(), b}) {
		t.Error("same listeners not equal")
	}
	if ListenersEqual([]Listener{a, b}, []Listener{b, a}) || ListenersEqual([]Listener{a}, []Listener{a, b}) {
		t.Error("other order or count equal")
	}
	l := fullListener()
	l.TrustedProxies = nil
	m := fullListener()
	m.TrustedProxies = []netip.Prefix{}
	if !l.Equal(m) {
		t.Error("an empty list and an absent one differ")
	}
}

// TestCurvesOrderIsNoChange: Go picks among a listener's curves in its
// own order, so a reload that only reorders them restarts nothing.
func TestCurvesOrderIsNoChange(t *testing.T) {
	a, b := fullListener(), fullListener()
	b.TLS.Curves = []string{"P-256", "X25519"}
	if !a.Equal(b) {
		t.Errorf("curves %v and %v: want Equal, the order being Go's", a.TLS.Curves, b.TLS.Curves)
	}
	b.TLS.Curves = []string{"P-256"}
	if a.Equal(b) {
		t.Errorf("curves %v and %v: want a change", a.TLS.Curves, b.TLS.Curves)
	}
}

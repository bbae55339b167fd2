package hostname

import (
	"errors"
	"strings"
	"testing"
)

func TestPattern(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		err      error
	}{
		{"chat.example.com", "chat.example.com", nil},
		{"Chat.Example.COM.", "chat.example.com", nil},
		{"*.Apps.example.com", "*.apps.example.com", nil},
		{"_svc.example.com", "_svc.example.com", nil},
		{"localhost", "localhost", nil},
		{"", "", ErrEmpty},
		{".", "", ErrEmpty},
		{"*.", "", ErrWildcard},
		{"chat.example.com:443", "", ErrPort},
		{"a.*.example.com", "", ErrWildcard},
		{"*", "", ErrWildcard},
		{"a..example.com", "", ErrLabel},
		{"-a.example.com", "", ErrLabel},
		{"chat.example.com..", "", ErrLabel},
		{strings.Repeat("a", 64) + ".com", "", ErrLabel},
		{strings.Repeat("a.", 127) + "aa", "", ErrTooLong},
		{"ch%61t.example.com", "", ErrChar},
		{"chät.example.com", "", ErrChar}, // U-labels: write the A-label
		{"CHAT.EXAMPLE.COM\u212a", "", ErrChar},
		{"[::1]", "", ErrChar},
		{"a b.example.com", "", ErrChar},
	} {
		got, err := Pattern(tt.in)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("Pattern(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestRequest(t *testing.T) {
	for in, want := range map[string]string{
		"Chat.Example.com:8443": "chat.example.com",
		"chat.example.com.":     "chat.example.com",
		"CHAT.example.com.:80":  "chat.example.com",
		"[::1]:8080":            "::1",
		"[::1]":                 "::1",
		"127.0.0.1:80":          "127.0.0.1",
		"":                      "",
	} {
		if got := Request(in); got != want {
			t.Errorf("Request(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCovers(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"chat.example.com", "chat.example.com", true},
		{"chat.example.com", "other.example.com", false},
		{"*.example.com", "chat.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "*.example.com", true},
		{"*.example.com", "*.b.example.com", true},
		{"*.b.example.com", "*.example.com", false},
		{"*.b.com", "*.ab.com", false},
		{"*.b.com", "xab.com", false},
		{"chat.example.com", "*.example.com", false},
	} {
		if got := Covers(tt.a, tt.b); got != tt.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzHostname: Pattern's output is canonical and a fixed point, and it
// agrees with Request on the same name; Covers is reflexive on every
// accepted pattern; nothing panics.
func FuzzHostname(f *testing.F) {
	for _, s := range []string{
		"chat.example.com", "Chat.Example.COM.", "*.apps.example.com", "chat.example.com:443",
		"[::1]:80", "xn--bcher-kva.example", "ch\u00e4t.example.com", "a..b", "*.", ".", "",
		"K\u212aLVIN.example.com", // KELVIN SIGN: lower-cases to 'k' under Unicode rules, not ASCII
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Pattern(s)
		if err != nil {
			return
		}
		if p != Canonical(p) || p != Canonical(s) {
			t.Fatalf("Pattern(%q) = %q is not canonical", s, p)
		}
		if again, err := Pattern(p); err != nil || again != p {
			t.Fatalf("Pattern(Pattern(%q)) = %q, %v; want %q", s, again, err, p)
		}
		if !IsWildcard(p) && Request(s) != p {
			t.Fatalf("Request(%q) = %q, Pattern gave %q", s, Request(s), p)
		}
		if !Covers(p, p) {
			t.Fatalf("Covers(%q, itself) is false", p)
		}
		for i := 0; i < len(p); i++ {
			if c := p[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
				t.Fatalf("Pattern(%q) = %q holds %q", s, p, c)
			}
		}
	})
}

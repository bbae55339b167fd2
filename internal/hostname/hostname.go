// Package hostname is the one place where edge decides what a host name is
// and when two spellings name the same host. The file's routes (conf), the
// routes services declare in Consul (discovery) and the Host of a request
// (proxy) all go through Canonical, so a collision can never appear only
// after one side normalised and the other did not: "Chat.Example.COM." in
// the file and "chat.example.com" in the registry are the same host
// everywhere.
//
// Names are ASCII. An internationalised name is written as its A-label
// ("xn--..."), which is what clients send in Host and SNI (RFC 5890 §2.3.2.1;
// RFC 9110 §7.2 carries Host as a reg-name, RFC 3986 §3.2.2); edge does no
// IDNA mapping of its own, so a U-label in the file or the registry is refused
// instead of being guessed at.
package hostname

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// MaxLen is the longest name accepted, without a trailing dot (RFC 1035
// §2.3.4 with the dot of the root label removed).
const MaxLen = 253

// Canonical returns the form in which edge compares host names: ASCII
// letters lower-cased (RFC 4343: DNS names compare case-insensitively) and
// one trailing dot removed (the absolute "example.com." names the same host
// as "example.com"). Anything else is left alone: Canonical never fails;
// Pattern says whether the result is a name at all.
func Canonical(h string) string {
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return asciiLower(h)
		}
	}
	return h
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Request returns the canonical host of a request's Host header (or an
// HTTP/2 :authority): the port and the brackets of an IPv6 literal removed
// (RFC 9110 §7.2, RFC 3986 §3.2.2), then Canonical.
func Request(hostport string) string {
	h := hostport
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return Canonical(h)
}

// Errors of Pattern, for errors.Is.
var (
	ErrEmpty    = errors.New("empty")
	ErrTooLong  = errors.New("longer than 253 characters")
	ErrPort     = errors.New("has a port: hosts match without one")
	ErrWildcard = errors.New(`has a wildcard other than a leading "*."`)
	ErrLabel    = errors.New("has an empty label, a label over 63 characters, or one that starts or ends with '-'")
	ErrChar     = errors.New("has a character outside letters, digits, '-' and '_'")
)

// Pattern validates a host the file or the registry routes and returns its
// canonical form: an exact name, or "*.suffix" for one or more labels below
// suffix (never suffix itself). Labels are letters, digits, '-' and '_' (the
// RFC 1123 §2.1 host name, plus the '_' of service names that RFC 3986's
// reg-name also admits), 1 to 63 characters, not starting or ending with '-'.
// No port, no IP literal, no percent-encoding, no non-ASCII. The error says
// what is wrong, without the input (callers quote it).
func Pattern(h string) (string, error) {
	c := Canonical(h)
	name := strings.TrimPrefix(c, "*.")
	switch {
	case name == "":
		return "", ErrEmpty
	case len(c) > MaxLen:
		return "", ErrTooLong
	case strings.Contains(name, "*"):
		return "", ErrWildcard
	case hasPort(name):
		return "", ErrPort
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", ErrLabel
		}
		for i := 0; i < len(label); i++ {
			if b := label[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '_') {
				return "", fmt.Errorf("%w: %q", ErrChar, b)
			}
		}
	}
	return c, nil
}

// hasPort reports whether h ends in ":digits" after a name.
func hasPort(h string) bool {
	i := strings.LastIndexByte(h, ':')
	if i <= 0 || i == len(h)-1 || strings.ContainsAny(h[:i], ":[]") {
		return false
	}
	for _, c := range h[i+1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// IsWildcard reports whether a canonical pattern is "*.suffix".
func IsWildcard(p string) bool { return strings.HasPrefix(p, "*.") }

// Covers reports whether every name that pattern b matches is also matched
// by pattern a; both are canonical (from Pattern). An exact name covers only
// itself; "*.example.com" covers "chat.example.com", "a.b.example.com" and
// "*.b.example.com", and also itself, but not "example.com".
func Covers(a, b string) bool {
	if a == b {
		return true
	}
	if !IsWildcard(a) {
		return false
	}
	suffix := a[1:] // ".example.com"
	name := strings.TrimPrefix(b, "*.")
	if IsWildcard(b) {
		// "*.x.example.com" names hosts below x.example.com, all of
		// them below example.com.
		return strings.HasSuffix("."+name, suffix)
	}
	return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
}

// Overlap reports whether some name is matched by both patterns.
func Overlap(a, b string) bool { return Covers(a, b) || Covers(b, a) }

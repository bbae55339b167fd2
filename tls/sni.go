package tls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// normalizeName lower-cases a DNS name and drops a trailing dot; SNI is
// case-insensitive (RFC 6066 section 3, RFC 4343).
func normalizeName(n string) string {
	n = strings.TrimSuffix(n, ".")
	for i := 0; i < len(n); i++ {
		if c := n[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(n)
		}
	}
	return n
}

// certSet is the immutable map GetCertificate reads with one atomic load.
// Lists are ordered by preference: ECDSA and Ed25519 before RSA (smaller and
// faster), then configuration order; SupportsCertificate picks the first the
// client can use.
type certSet struct {
	exact    map[string][]*tls.Certificate
	wildcard map[string][]*tls.Certificate // key ".example.com" for "*.example.com"
	// blocked holds names (exact, or wildcard keys) whose every certificate
	// is refused by the must-staple policy.
	blocked  map[string]bool
	fallback []*tls.Certificate
}

// servedPair is one entry's input to buildCertSet.
type servedPair struct {
	lc       *loadedCert
	cert     *tls.Certificate // nil: refused (must-staple without staple) or unusable
	unusable bool             // expired or not yet valid: left out, its names not blocked
}

func keyRank(c *loadedCert) int {
	if c.keyType == "RSA" {
		return 1
	}
	return 0
}

func buildCertSet(pairs []servedPair) *certSet {
	s := &certSet{
		exact:    make(map[string][]*tls.Certificate),
		wildcard: make(map[string][]*tls.Certificate),
		blocked:  make(map[string]bool),
	}
	order := make([]servedPair, len(pairs))
	copy(order, pairs)
	slices.SortStableFunc(order, func(a, b servedPair) int { return keyRank(a.lc) - keyRank(b.lc) })
	blocked := make(map[string]bool)
	for _, p := range order {
		if p.unusable {
			continue
		}
		for _, n := range p.lc.names {
			m, key := s.exact, n
			if strings.HasPrefix(n, "*.") {
				m, key = s.wildcard, n[1:]
			}
			if p.cert == nil {
				blocked[key] = true
				continue
			}
			m[key] = append(m[key], p.cert)
		}
	}
	for key := range blocked {
		if len(s.exact[key]) == 0 && len(s.wildcard[key]) == 0 {
			s.blocked[key] = true
		}
	}
	// The default is the first configured pair, with its siblings for the
	// same names (an ECDSA and an RSA certificate) ahead of everything else.
	if len(pairs) > 0 {
		first := pairs[0].lc.names
		for _, p := range order {
			if p.cert != nil && slices.Equal(p.lc.names, first) {
				s.fallback = append(s.fallback, p.cert)
			}
		}
		for _, p := range pairs {
			if p.cert != nil && !slices.Contains(s.fallback, p.cert) {
				s.fallback = append(s.fallback, p.cert)
			}
		}
	}
	return s
}

var errNoCertificate = errors.New("no certificate available")

// lookup chooses a certificate for hello: exact name, then wildcard for the
// first label, then the default.
func (s *certSet) lookup(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := normalizeName(hello.ServerName)
	if name != "" {
		if l := s.exact[name]; len(l) > 0 {
			return choose(hello, l), nil
		}
		blocked := s.blocked[name]
		if i := strings.IndexByte(name, '.'); i > 0 {
			if l := s.wildcard[name[i:]]; len(l) > 0 {
				return choose(hello, l), nil
			}
			blocked = blocked || s.blocked[name[i:]]
		}
		if blocked {
			return nil, fmt.Errorf("certificate for %q is must-staple and has no valid OCSP staple (policy %q)", name, MustStapleRefuse)
		}
	}
	if len(s.fallback) == 0 {
		return nil, errNoCertificate
	}
	return choose(hello, s.fallback), nil
}

// choose returns the first certificate the client supports, else the first
// one (as crypto/tls does for Config.Certificates): the handshake then fails
// with the client's own, clearer, alert.
func choose(hello *tls.ClientHelloInfo, l []*tls.Certificate) *tls.Certificate {
	if len(l) > 1 {
		for _, c := range l {
			if hello.SupportsCertificate(c) == nil {
				return c
			}
		}
	}
	return l[0]
}

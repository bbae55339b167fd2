package auth

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Mark is what a live connection keeps of the token it was opened with:
// enough to find it when a revocation names it, and nothing that is
// personal data or a credential. 24 bytes, held for the connection's life
// (the claims themselves are dropped after the upgrade).
type Mark struct {
	// Subject and ID are SubjectHash and IDHash of the token's issuer
	// with its "sub" and its "jti" (0: the claim was absent).
	Subject, ID uint64
	// IssuedAt is the token's "iat", unix seconds (0: absent, which an
	// "issued before" revocation matches: an unknown age is an old one).
	IssuedAt int64
}

// MarkOf is the Mark of claims p verified. The hashes take the
// provider's issuer, not the token's: a revocation names a provider's
// issuer (or every one), and a provider without an issuer ("" accepts
// any) is matched under "" for every token it verifies.
func MarkOf(c *Claims, p *Provider) Mark {
	m := Mark{}
	iss := c.Issuer
	if p != nil {
		iss = p.Issuer
	}
	if c.Subject != "" {
		m.Subject = SubjectHash(iss, c.Subject)
	}
	if c.ID != "" {
		m.ID = IDHash(iss, c.ID)
	}
	if !c.IssuedAt.IsZero() {
		m.IssuedAt = c.IssuedAt.Unix()
	}
	return m
}

// SubjectHash is a subject's 64-bit name in marks, revocations, limits
// and the access log: the first 8 bytes of SHA-256 over the issuer, a NUL
// and the subject, read big-endian. It is the same in every process and
// on every edge (a mark moves with its connection to a new process, a
// revocation is shared by the fleet), and an operator computes it without
// edge: printf '%s\0%s' "$iss" "$sub" | sha256sum | cut -c1-16. The
// subject is the issuer's (RFC 7519 §4.1.2: unique within the issuer),
// so the issuer is part of it.
func SubjectHash(issuer, subject string) uint64 { return hash64("", issuer, subject) }

// IDHash is a token id's 64-bit name, as SubjectHash with a distinct
// prefix so that a jti equal to a subject never names the same thing.
func IDHash(issuer, id string) uint64 { return hash64("jti\x00", issuer, id) }

func hash64(prefix, issuer, v string) uint64 {
	h := sha256.New()
	h.Write([]byte(prefix))
	h.Write([]byte(issuer))
	h.Write([]byte{0})
	h.Write([]byte(v))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// Issued is m's "iat" as a time (zero: absent).
func (m Mark) Issued() time.Time {
	if m.IssuedAt == 0 {
		return time.Time{}
	}
	return time.Unix(m.IssuedAt, 0)
}

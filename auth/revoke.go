package auth

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Revocation names tokens that must no longer be accepted, and the live
// connections opened with them: every token of a subject (Subject), one
// token (ID, its "jti"), or the tokens issued before a moment (Before,
// alone or with Subject). Until is when the entry may be forgotten: once
// no token it names can still be valid (the latest expiry of a token it
// names, which edge bounds with a provider's largest lifetime).
type Revocation struct {
	Issuer  string    `json:"iss,omitempty"`
	Subject string    `json:"sub,omitempty"`
	ID      string    `json:"jti,omitempty"`
	Before  time.Time `json:"before,omitzero"`
	Until   time.Time `json:"until"`
	// Reason is the operator's note, kept for /status; never matched.
	Reason string `json:"reason,omitempty"`
}

// MaxRevocationField bounds each string of a Revocation: an entry comes
// from an admin request or from Consul, and a fleet holds thousands.
const MaxRevocationField = 256

// Validate checks that r names something: exactly one of ID, Subject or
// Before alone (Subject may carry a Before), and an Until. An issuer with
// a bare Before is refused: a Mark holds no issuer, so "every token of
// this issuer issued before T" could not be told apart from another
// issuer's.
func (r *Revocation) Validate() error {
	for _, f := range []string{r.Issuer, r.Subject, r.ID, r.Reason} {
		if len(f) > MaxRevocationField {
			return fmt.Errorf("a field is longer than %d bytes", MaxRevocationField)
		}
	}
	switch {
	case r.ID != "" && (r.Subject != "" || !r.Before.IsZero()):
		return errors.New("jti names one token: give it alone")
	case r.ID == "" && r.Subject == "" && r.Before.IsZero():
		return errors.New("names nothing: give sub, jti or before")
	case r.ID == "" && r.Subject == "" && r.Issuer != "":
		return errors.New("before with iss is not supported: give before alone, or with sub")
	case r.Until.IsZero():
		return errors.New("until is missing")
	}
	return nil
}

// Bounded checks r's times against now, for an entry read from a store
// others can write: a "before" in the future would revoke tokens not yet
// issued (every token, for good, with a far one), and an "until" past
// now+maxUntil would outlive every token it can name.
func (r *Revocation) Bounded(now time.Time, maxUntil time.Duration) error {
	switch {
	case r.Before.After(now.Add(time.Minute)):
		return fmt.Errorf("before %s is in the future", r.Before.UTC().Format(time.RFC3339))
	case r.Until.After(now.Add(maxUntil)):
		return fmt.Errorf("until %s is more than %s away", r.Until.UTC().Format(time.RFC3339), maxUntil)
	}
	return nil
}

// Revoked is an immutable, compiled set of revocations: what the upgrade
// path and the live connections are checked against, without a lock.
type Revoked struct {
	// subjects: every token of the subject issued before the value (unix
	// seconds; math.MaxInt64: all of them).
	subjects map[uint64]int64
	ids      map[uint64]struct{}
	// before: every token issued before it (unix seconds; 0: none).
	before int64
	n      int
}

// CompileRevocations compiles the entries still in force at now. An entry
// without an issuer names its subject or jti under each of issuers (the
// providers edge verifies).
func CompileRevocations(entries []Revocation, issuers []string, now time.Time) *Revoked {
	r := &Revoked{subjects: map[uint64]int64{}, ids: map[uint64]struct{}{}}
	for i := range entries {
		e := &entries[i]
		if e.Validate() != nil || !e.Until.After(now) {
			continue
		}
		r.n++
		iss := issuers
		if e.Issuer != "" {
			iss = []string{e.Issuer}
		}
		switch {
		case e.ID != "":
			for _, is := range iss {
				r.ids[IDHash(is, e.ID)] = struct{}{}
			}
		case e.Subject != "":
			t := int64(math.MaxInt64)
			if !e.Before.IsZero() {
				t = e.Before.Unix()
			}
			for _, is := range iss {
				h := SubjectHash(is, e.Subject)
				r.subjects[h] = max(r.subjects[h], t)
			}
		default:
			r.before = max(r.before, e.Before.Unix())
		}
	}
	return r
}

// Len is the number of entries in force when the set was compiled.
func (r *Revoked) Len() int {
	if r == nil {
		return 0
	}
	return r.n
}

// Revoked reports whether the token m was made from is revoked. A token
// without "iat" counts as issued at the beginning of time.
func (r *Revoked) Revoked(m Mark) bool {
	if r == nil {
		return false
	}
	if m.IssuedAt < r.before {
		return true
	}
	if m.ID != 0 {
		if _, ok := r.ids[m.ID]; ok {
			return true
		}
	}
	if m.Subject != 0 {
		if t, ok := r.subjects[m.Subject]; ok && m.IssuedAt < t {
			return true
		}
	}
	return false
}

package tls

import "time"

// Status is a point-in-time report for the admin endpoint. It never contains
// key material.
type Status struct {
	Certificates []CertStatus `json:"certificates"`
	Tickets      TicketStatus `json:"tickets"`
}

// CertStatus describes one configured certificate pair: the pair being
// served and, when the files on disk were refused, why.
type CertStatus struct {
	CertFile  string    `json:"cert_file"`
	KeyFile   string    `json:"key_file"`
	Names     []string  `json:"names"`
	Default   bool      `json:"default,omitempty"`
	KeyType   string    `json:"key_type"`
	Serial    string    `json:"serial"`
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
	LoadedAt  time.Time `json:"loaded_at"`
	// Served is false when the must-staple policy "refuse" keeps the
	// certificate out of handshakes for want of a valid staple.
	Served bool `json:"served"`
	// Usable is false when the pair on disk is expired or not yet valid:
	// it is left out of handshakes (the others are served) and LastError
	// says why.
	Usable bool `json:"usable"`
	// LastError is why the files currently on disk are not served (the
	// previous pair is), empty when they are.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt time.Time  `json:"last_error_at,omitzero"`
	OCSP        OCSPStatus `json:"ocsp"`
}

// OCSPStatus describes the stapling state of one certificate.
type OCSPStatus struct {
	// State is one of "none" (no responder named: normal), "disabled",
	// "no-issuer" (no issuer in the chain, no issuer file, no
	// http(s) caIssuers URL), "unusable" (the certificate is not served),
	// "pending", "good", "revoked", "unknown", "expired" or
	// "error" (no valid staple after a failure).
	State      string   `json:"state"`
	Responders []string `json:"responders,omitempty"`
	MustStaple bool     `json:"must_staple,omitempty"`
	// Stapled reports whether handshakes carry a staple now.
	Stapled     bool      `json:"stapled"`
	ThisUpdate  time.Time `json:"this_update,omitzero"`
	NextUpdate  time.Time `json:"next_update,omitzero"`
	NextRefresh time.Time `json:"next_refresh,omitzero"`
	RevokedAt   time.Time `json:"revoked_at,omitzero"`
	// LastError is the last failed attempt; a good staple may still be
	// served until its NextUpdate.
	LastError string `json:"last_error,omitempty"`
}

// TicketStatus describes the session-ticket keys without revealing them.
type TicketStatus struct {
	Enabled bool `json:"enabled"`
	// Source is "memory", "file:<path>" or "source".
	Source string `json:"source,omitempty"`
	// Generation counts key changes since start.
	Generation uint64 `json:"generation"`
	Keys       int    `json:"keys"`
	// KeyGenerations lists the generation of each accepted key, the
	// encrypting one first.
	KeyGenerations []uint64  `json:"key_generations,omitempty"`
	LastChange     time.Time `json:"last_change,omitzero"`
	NextRotation   time.Time `json:"next_rotation,omitzero"`
	// MaxAge is the longest a ticket is accepted after it was issued.
	MaxAge    string `json:"max_age,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Refused says why the source's last value was refused (for the
	// fleet's entry in Consul KV: unopened, unsealed, version, oversized,
	// malformed); "" when it was not, Consul being down included. The
	// keys in use stay.
	Refused string `json:"refused,omitempty"`
}

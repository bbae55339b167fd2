// Package fleet is what the edges of a fleet share through Consul, with no
// protocol of their own: each edge's load and the shares of fleet-scope
// limits it applies from the others' (Load, Shares), the operator's actions
// of fleet scope (Actions), the pools' canaries and pauses (Controls), the
// token revocations (Revocations), the pacing of process upgrades (UpgradeSlots),
// and the secrets every edge must hold alike: session-ticket keys
// (TicketKeys), cookie keys (CookieKeys) and OCSP staples (Staples).
//
// Every KV read is bounded before anything is decoded, with the mechanics
// of internal/consul: an entry's answer is cut at its value's bound, a
// prefix is followed by its key names and read entry by entry, and a key no
// session holds is refused unread.
//
// # Session-ticket keys for a fleet
//
// TicketKeys keeps a fleet's TLS session-ticket keys in one KV entry in the
// key-file format, the second line a staged next key. Any edge that reads
// the entry once its rotation is due rotates it with a check-and-set on the
// index it read, so exactly one write wins and no leader is needed; the
// entry's Flags hold the time of the last rotation. A value that does not
// validate is reported and never overwritten. Given the key-file parser
// (edgetls.ParseTicketKeys, which owns the format), a TicketKeys is the
// Terminator's TicketKeySource. With a SealKey the entry is sealed
// (sealedentry.go: AES-256-GCM, the format's version, the entry's path and
// its Flags as associated data), so a reader of the entry without the
// fleet's seal key learns no key and a writer without it cannot give
// edges keys of theirs. An entry that does not open is refused (a
// *RefusedEntryError, which says why) and never overwritten; one in the
// clear is refused too, and once due is replaced by fresh keys, sealed.
//
// # Cookie keys and OCSP staples for a fleet
//
// CookieKeys keeps a cookie pool's signing keys the same way (32-byte keys),
// follows the entry with a blocking query so a rotation reaches every edge
// at once, and feeds balance.Pool.SetCookieKeys; ParseCookieKeys bounds an
// entry (8 KiB, 16 keys of 16 to 256 bytes), and its answers are cut at
// that size before they are decoded (a ticket-key entry's at
// MaxTicketKeysBytes). Staples keeps OCSP responses
// under PREFIX/ocsp/<certificate id> with a Consul lock (a session and an
// acquire on the same key plus ".lock") so one edge at a time asks the
// responder; it is edgetls's StapleShare, which verifies what it reads.
//
// # Load
//
// Load publishes one record per edge (Record: id, address,
// version, pid, readiness, connections, each pool's per-backend active
// counts and recent new-connection rate) under PREFIX/edges/<id>, bound to
// a Consul session with a TTL and behaviour delete, so a dead edge's
// record vanishes by itself; it writes at most once every PublishEvery (2
// s) and only when the load changed, and a stopping edge destroys its
// session. It follows the prefix's keys with one blocking query (at most
// 1 MiB of names, MaxKeys looked at) and publishes each answer as an
// immutable Snapshot (Total, Size, Edge), which fleet-scope limits
// and the fleet's /status view read. A key no session holds is refused
// unread; a key unchanged since it was read keeps what was read; only the
// changed keys a session holds are read, one by one, each answer cut at
// MaxRecordBytes before it is decoded (an oversized one is refused
// unread, once per change), at most MaxEdges a round. Every refusal
// is logged once and counted in Status (Refused, Unheld, Oversized,
// Excess). Reads start at most every ReadInterval (250 ms), and a read
// that read no record holds the next for QuietInterval (the wait, 5 s),
// so a writer of keys the edge does not count wakes it no more often
// than a quiet fleet does, at the price of delaying a real change by at
// most that much while they write. What is read is bounded (64 KiB a
// record, 256 edges, 256 pools, 4096 backends a pool), versioned
// (RecordVersion; another version is refused), filed under its own
// id, and cut to the pools and backends the edge has
// (LoadOptions.Known, applied at every snapshot, since what the edge
// has changes): a hostile writer can skew the numbers of registered
// backends, never name another. Status says when the sums are stale (no
// answer within StaleAfter, or a failed query or publication).
//
// Shares is the policy between the two: it makes the pools' part of
// this edge's record (Loads: rates, counts, claims) and, from every
// snapshot, sets this edge's share of each fleet-scope limit with the
// functions of balance (Apply), or the limit divided by the last fresh
// fleet size while the numbers are stale. A share is lowered at once and
// raised only to a claim Consul holds (Published), so the other edges can
// count it. cmd/edge only hands it the snapshot and its pools.
//
// # Actions
//
// Actions keeps the operator's actions of fleet scope (drain, disable,
// enable, weight; Action) in Consul KV, one entry per pool and backend
// under PREFIX/admin/<pool>/<backend> (path-escaped), written by Act with
// a check-and-set and followed by every edge with one keys-only blocking
// query on the folder, each entry then read on its own, so a refused entry
// (too large, too many, broken) is refused alone and the valid ones stay in
// force; an edge that starts reads them (Load) before it serves, or, while
// Consul does not answer, the last set it read (StateDir), and a
// backend that joins later gets its action in the snapshot that adds it.
// An entry is written to the fleet layer of its pool's name (Layer, a
// balance.Layer every pool of that name is built with, apart from the
// local operator's), and a new drain sends the backend's live connections 1012 over its window,
// like the local drain. What is read is bounded (MaxActionBytes an
// entry, its answer cut at that size before it is decoded, MaxActions
// entries fetched, keys naming this edge's
// backends first, MaxActionsResponse an answer through
// consul.ClientOptions.MaxResponseBytes), versioned (ActionVersion),
// checked (state, weight, window, canonical keys) and applied only to
// backends the edge has: a refused entry is logged once and changes
// nothing.
//
// # Upgrade slots
//
// UpgradeSlots paces a fleet's process upgrades with Consul's semaphore
// (api.Semaphore) at PREFIX/upgrade: an edge takes one of Limit slots
// before it starts its new process and gives it back once its connections
// are handed over. Each wait has a session of its own (behavior delete, TTL
// 15 s, renewed by a goroutine that Acquire starts and release ends), so a
// dead holder's slot frees itself; a wait is bounded, and says who holds
// the slots at its start and after every round of blocking query. What is
// read to name the holders is bounded (the lock 64 KiB, a holder 1 KiB,
// eight named) and made printable; the semaphore's own reads are bounded by
// Consul's value size.
package fleet

package tls

import "context"

// Test hooks: drive the background work without waiting for timers.

// PollFiles runs one file-polling round.
func (t *Terminator) PollFiles(ctx context.Context) { t.pollFiles(ctx) }

// RotateTicketKeys starts a new generated ticket key now.
func (t *Terminator) RotateTicketKeys() error { return t.rotateTickets() }

// PollTicketKeys asks the ticket key source now.
func (t *Terminator) PollTicketKeys(ctx context.Context) error { return t.pollTicketKeys(ctx) }

// RefreshOCSP asks every responder now, then drops expired staples.
func (t *Terminator) RefreshOCSP(ctx context.Context) { t.ocspTick(ctx, true) }

// CheckOCSP does what is due at the current clock: refreshes and expiry.
func (t *Terminator) CheckOCSP(ctx context.Context) { t.ocspTick(ctx, false) }

// TicketAESKeys returns the AES key arrays in use, newest first, so a test
// can see retired ones cleared.
func (t *Terminator) TicketAESKeys() []*[32]byte {
	t.tickets.mu.RLock()
	defer t.tickets.mu.RUnlock()
	var out []*[32]byte
	for _, k := range t.tickets.keys {
		out = append(out, &k.aes)
	}
	return out
}

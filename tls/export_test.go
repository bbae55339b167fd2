package tls

import "context"

// Test hooks: drive the background work without waiting for timers.

// PollFiles runs one file-polling round.
func (t *Terminator) PollFiles(ctx context.Context) { t.store.poll(ctx) }

// RotateTicketKeys starts a new generated ticket key now.
func (t *Terminator) RotateTicketKeys() error { return t.tickets.rotate() }

// PollTicketKeys asks the ticket key source now.
func (t *Terminator) PollTicketKeys(ctx context.Context) error { return t.tickets.poll(ctx) }

// RefreshOCSP asks every responder now, then drops expired staples.
func (t *Terminator) RefreshOCSP(ctx context.Context) { t.stapler.refresh(ctx, t.store, true) }

// CheckOCSP does what is due at the current clock: refreshes and expiry.
func (t *Terminator) CheckOCSP(ctx context.Context) { t.stapler.refresh(ctx, t.store, false) }

// TicketAESKeys returns the AES key arrays in use, newest first, so a test
// can see retired ones cleared.
func (t *Terminator) TicketAESKeys() []*[32]byte {
	k := t.tickets.keys
	k.mu.RLock()
	defer k.mu.RUnlock()
	var out []*[32]byte
	for _, key := range k.keys {
		out = append(out, &key.aes)
	}
	return out
}

// CheckTicketState parses a carried ticket state as TicketOptions.Carried does.
func CheckTicketState(b []byte) error {
	_, _, _, err := parseTicketState(b)
	return err
}

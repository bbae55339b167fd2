// Package handoff is the wire of a live WebSocket moved from one edge
// process to another, and its sender: a versioned, length-checked state
// record per connection, sent together with the connection's two socket
// descriptors (SCM_RIGHTS, unix(7)) over a Unix stream socket, and a
// one-byte answer from the receiver. It knows nothing of the splice:
// proxy fills and reads State, and hands Move its connections behind
// Conn and Item.
//
//	state.go        State, Encode, Decode: the record (pure: no network)
//	wire_linux.go   Send, Receive, the answers: one message on the socket
//	sender.go       Options and their defaults, Conn, Item, Result
//	sender_linux.go Move: the sender's window, answers, retries and stall
//
// Move keeps up to Options.Window messages in flight and reads their
// answers in order; connections that were busy are tried again in rounds
// for Options.RetryFor; a peer that answers nothing for Options.Stall
// ends the hand-off (ErrStalled). A connection whose answer is not known
// when the hand-off ends may run in the peer already, so it is given up
// (Item.Forget), never resumed: no connection runs in both processes.
//
// One message is a header and a body, sent in one sendmsg(2) with both
// descriptors attached to its first byte:
//
//	magic "EDGH" | version u8 | flags u8 | body length u32 (big endian)
//	body: listener, pool, backend ID, backend address, method, host,
//	      path, request ID, TLS version name  (each u16 length + bytes)
//	      client address, peer address       (each u8 length 0/4/16 + bytes)
//	      start (unix nanos), upgrade (nanos), bytes in, bytes out,
//	      last activity (unix nanos)          (each i64)
//	      session                             (u32 length + wsession state)
//	      if flags&FlagTLS13: TLS 1.3 record-layer state, then the bytes
//	      read from the socket but not yet decrypted (each u32 length + bytes)
//
// The receiver answers each message with one byte, AckAdopted or
// AckRefused, after it holds the descriptors, and as soon as it has
// read that message: it must not wait for the next one. A sender may
// keep several messages in flight and read the answers in order. A record it cannot read is
// refused and its descriptors closed; the next message is read as usual,
// since the length in the header still frames it. Only a header that is
// not one (bad magic, a length over MaxBody) loses the framing.
package handoff

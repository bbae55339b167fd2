package record

import (
	"errors"
	"fmt"
)

// Resume computes the state crypto/tls reached from the raw bytes it read
// from and wrote to the socket since the start of the connection
// (ClientHello onwards), so that edge can take the connection over.
//
// Each log is split into records. The records before the first one that
// authenticates under the application key at sequence 0 are the
// handshake's: plaintext hellos, change_cipher_spec, and records under the
// handshake keys, which fail authentication under the application key
// (that is how they are told apart). Every complete record from there on
// is replayed through the same state machine as Open, so KeyUpdates that
// crypto/tls read or answered are followed, and their plaintext discarded:
// the caller takes over only when crypto/tls holds no data it read and has
// not yet delivered (ResumeKeeping returns that data). A client's update_requested that the write log does
// not answer leaves an answer pending.
//
// readTail is a copy of the incomplete record at the end of the read log,
// to be passed to Open in front of the next bytes from the socket. The
// write log must end on a record boundary. Neither log is modified. Any
// error means: do not take over, keep crypto/tls.
//
// The secrets must be this connection's (KeyLog.Take with the
// ClientRandom of its read log). A record under another key looks like a
// handshake record, so wrong secrets would skip every record of both logs
// and resume at sequence 0 under keys someone else may know: the client
// chooses its random, and another client can reuse it (KeyLog). So the
// read log must hold at least one record that authenticates under
// clientSecret (a takeover follows crypto/tls's delivery of application
// data, the upgrade request); without one Resume fails. The server
// secret comes from the same handshake as the client secret (KeyLog
// refuses a random that two handshakes logged), so it is not checked
// beyond the write log's own application records.
func Resume(suite uint16, clientSecret, serverSecret, readLog, writeLog []byte) (s *State, readTail []byte, err error) {
	s, _, readTail, err = resume(suite, clientSecret, serverSecret, readLog, writeLog, -1)
	return s, readTail, err
}

// ResumeKeeping is Resume for a takeover while crypto/tls may still hold
// application data it read from the socket but did not deliver (a client
// often sends its first request in the same segment as its Finished):
// delivered is the number of application data bytes crypto/tls's Read
// returned, and undelivered is the plaintext read after them, which the
// caller handles as if Open had returned it. delivered beyond what the
// read log holds is an error.
func ResumeKeeping(suite uint16, clientSecret, serverSecret, readLog, writeLog []byte, delivered int) (s *State, undelivered, readTail []byte, err error) {
	if delivered < 0 {
		return nil, nil, nil, fmt.Errorf("tls record: %d bytes delivered", delivered)
	}
	return resume(suite, clientSecret, serverSecret, readLog, writeLog, delivered)
}

// resume is Resume, keeping the read plaintext after the first delivered
// bytes unless delivered is negative.
func resume(suite uint16, clientSecret, serverSecret, readLog, writeLog []byte, delivered int) (s *State, undelivered, readTail []byte, err error) {
	s, err = New(suite, clientSecret, serverSecret)
	if err != nil {
		return nil, nil, nil, err
	}
	// The write log is replayed by the client's view of the connection: its
	// read direction is the server's write direction (keys derived once, by
	// New), and NewSessionTicket is legal in it. Replaying reads only.
	view := &State{peerIsServer: true, suite: s.suite, read: s.write}
	var plain *[]byte
	if delivered >= 0 {
		plain = &undelivered
	}
	// Records are opened in place, so in a copy: one buffer for both logs,
	// which are replayed one after the other.
	scratch := make([]byte, max(len(readLog), len(writeLog)))
	requests, _, opened, tail, err := replay(s, readLog, plain, scratch)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls record: replaying the read log: %w", err)
	}
	if opened == 0 {
		return nil, nil, nil, errors.New("tls record: no record of the read log authenticates under the client secret")
	}
	if delivered > len(undelivered) {
		return nil, nil, nil, fmt.Errorf("tls record: %d bytes delivered, the read log holds %d", delivered, len(undelivered))
	}
	if delivered >= 0 {
		undelivered = undelivered[delivered:]
	}
	_, updates, _, wtail, err := replay(view, writeLog, nil, scratch)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls record: replaying the write log: %w", err)
	}
	if len(wtail) > 0 || view.hsHave > 0 {
		return nil, nil, nil, errors.New("tls record: the write log ends inside a record or a handshake message")
	}
	s.write = view.read
	// crypto/tls answers each update_requested as it reads it (and never
	// updates its key otherwise), so an answer is owed only if fewer
	// KeyUpdates were written than requested.
	s.pending.Store(requests > updates)
	return s, undelivered, append([]byte(nil), tail...), nil
}

// replay opens the application records of log with st and counts the
// records it opened, the update_requested KeyUpdates it read and the key
// switches it made. The plaintext is appended to *plain, or dropped when
// plain is nil. scratch, at least as long as log, is overwritten.
func replay(st *State, log []byte, plain *[]byte, scratch []byte) (requests, updates, opened int, tail []byte, err error) {
	start, err := applicationStart(st, log, scratch)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	buf := scratch[:len(log)-start]
	copy(buf, log[start:])
	for off := 0; ; {
		rest := buf[off:]
		if len(rest) < headerLen || len(rest) < headerLen+bodyLen(rest) {
			return requests, updates, opened, log[start+off:], nil
		}
		n := headerLen + bodyLen(rest)
		data, used, err := st.Open(rest[:n])
		if plain != nil {
			*plain = append(*plain, data...)
		}
		if err != nil {
			return 0, 0, 0, nil, fmt.Errorf("record at offset %d: %w", start+off, err)
		}
		if st.pending.Swap(false) {
			requests++
		}
		if st.read.seq == 0 {
			updates++
		}
		opened++
		off += used
	}
}

// applicationStart returns the offset of the first record of log that
// authenticates under st's read key at its sequence number, or of the
// incomplete record at the end, or len(log). Each trial opens a copy in
// scratch, at least as long as log.
func applicationStart(st *State, log, scratch []byte) (int, error) {
	if st.read.aead == nil {
		st.read.build(st.suite)
	}
	for off := 0; ; {
		rest := log[off:]
		if len(rest) < headerLen {
			return off, nil
		}
		n := headerLen + bodyLen(rest)
		if n > MaxRecord {
			return 0, fmt.Errorf("handshake record of %d bytes at offset %d", n-headerLen, off)
		}
		if len(rest) < n {
			return off, nil
		}
		switch rest[0] {
		case typeHandshake, typeChangeCipherSpec:
			// The plaintext hellos and the compatibility change_cipher_spec (RFC 8446 §D.4).
		case typeApplicationData:
			trial := st.read // a copy: a failed or successful trial leaves st alone
			if _, ok := trial.open(st.suite, scratch[:copy(scratch, rest[:n])]); ok {
				return off, nil
			}
		default:
			return 0, fmt.Errorf("record type %d at offset %d in the handshake", rest[0], off)
		}
		off += n
	}
}

// ClientRandom returns the 32-byte random of the ClientHello at the front of
// a read log (handshake header 4 bytes, legacy_version 2, then random; RFC
// 8446 §4.1.2), or false if the log does not start with handshake records
// holding a ClientHello's first 38 bytes. The ClientHello may span records
// (§5.1: a client can send it in fragments as small as one byte, and
// crypto/tls accepts them), so the random is a copy of the bytes gathered
// from the records' bodies.
func ClientRandom(readLog []byte) ([]byte, bool) {
	const need = 4 + 2 + 32
	var hs [need]byte
	have := 0
	for off := 0; have < need; {
		rest := readLog[off:]
		if len(rest) < headerLen || rest[0] != typeHandshake {
			return nil, false
		}
		body := rest[headerLen:min(len(rest), headerLen+bodyLen(rest))]
		have += copy(hs[have:], body)
		off += headerLen + len(body)
	}
	if hs[0] != 1 {
		return nil, false
	}
	return append([]byte(nil), hs[need-32:]...), true
}

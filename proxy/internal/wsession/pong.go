package wsession

import "github.com/edgelb/edge/internal/wswire"

// Pongs that answer edge's own pings end at edge.
//
// edge pings a silent client (an empty ping, wswire.Ping) and any client
// byte counts as life for the ping timeout, so the client's pong has done
// its work once it is read. Forwarding it to the backend, which never
// asked for it, is allowed (RFC 6455 §5.5.3: unsolicited pongs need no
// answer), but at 100,000 connections pinged every 30 s it is thousands
// of backend writes and wake-ups a second for nothing. So a client pong
// is consumed, not forwarded, when all of these hold:
//   - edge's ping is out and no client pong answered it yet;
//   - no backend ping may be waiting for its pong: every ping the backend
//     sent (the backend->client tracker counts them) was followed by a
//     client pong that went on;
//   - the pong is empty (a pong carries its ping's data, §5.5.3, and
//     edge's is empty: a pong with data answers someone else's ping),
//     masked (an unmasked client frame is refused, §5.1, strict.go),
//     final, and whole in the bytes at hand at a frame boundary. A pong
//     whose header is split across reads goes on: part of it may already
//     have gone, and the stream must never be cut mid-frame.
//
// The consumed pong still counts as a client frame (the rate, the frame
// tracker, the deflate counting, which skips control frames, §5.5), and
// as a byte from the client for the ping timeout.

// emptyPong is the start of a final, masked, empty pong: its header is
// these two bytes and the four of its masking key (RFC 6455 §5.2).
var emptyPong = [6]byte{0x80 | wswire.OpPong, 0x80}

// isEmptyPong reports whether p starts with a whole empty masked pong.
func isEmptyPong(p []byte) bool {
	return len(p) >= len(emptyPong) && p[0] == emptyPong[0] && p[1] == emptyPong[1]
}

// pongCounting is the counting for client bytes: masked frames, with
// the inflated count when it is on, frames counted, and dropPong when a
// pong now would answer edge's ping and nobody else's. Client reader
// only.
func (s *Session) pongCounting() counting {
	f := s.fw
	var z *zcount
	if f.z.on {
		z = &f.z
	}
	seen := f.backendPings.Load()
	drop := s.cfg.PingInterval > 0 && f.edgePing.Load() && seen == f.pongedAt
	return counting{client: true, z: z, limit: f.c2b.msgLimit, ps: s.cfg.Inflate, budget: -1, seen: seen, dropPong: drop, dropAt: -1}
}

// notePongs records the client pongs that went by in k: a consumed one
// answered edge's ping; one that went on answers the backend's pings
// counted before the bytes were looked at (k.seen; one counted since
// stays outstanding). Client reader only.
func (s *Session) notePongs(k *counting) {
	f := s.fw
	if k.dropAt >= 0 {
		f.edgePing.Store(false)
	}
	if k.pongs > 0 {
		f.pongedAt = k.seen
	}
}

// noteBackendPings counts n pings the backend sent. Backend reader only.
func (s *Session) noteBackendPings(n int) {
	if n > 0 && s.fw != nil {
		s.fw.backendPings.Add(uint32(n))
	}
}

// dropped turns c, the verdict on the n bytes consumed, into one that
// says which of them are the pong edge consumed (k.dropAt), when c lets
// all n go on.
func dropped(c Client, k *counting, n int) Client {
	if k.dropAt < 0 || c.N != n {
		return c
	}
	c.N, c.Drop = k.dropAt, n-k.dropAt
	return c
}

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/gorilla/websocket"
)

// Client implementations, chosen with -client. Both run over the same
// crypto/tls connection with the same settings; they differ in how they
// frame, buffer and write messages, which is what the proxy sees as TLS
// records:
//
//	gorilla  gorilla/websocket, 1 KiB read and write buffers. A message is
//	         written as frames of at most 1 KiB: header and payload leave in
//	         one Write, so one TLS record per frame (a 100-byte message is
//	         one 106-byte frame, one record; 16 KiB is 16 frames and
//	         records; the client never sends a large frame unfragmented).
//	         Reads go through its 1 KiB bufio.Reader.
//	gobwas   gobwas/ws: the upgrade with ws.Dialer.Upgrade, then frames
//	         written with ws.WriteHeaderBuffer and the masked payload into a
//	         bufio.Writer of 16 KiB + 14 bytes, taken from a pool for the
//	         write and flushed once per message: a message of up to 16 KiB
//	         is one frame in one Write (100 bytes: one 106-byte record, as
//	         gorilla); a larger one leaves in Writes of 16 KiB + 14. crypto/tls
//	         cuts a Write into records: on a fresh connection its dynamic
//	         record sizing starts at about 1.2 KiB per record and grows by
//	         as much per record until 128 KiB were sent, then 16 KiB (a
//	         16 KiB message right after the upgrade and a small echo: 4
//	         records of 2.1 to 5.9 KiB). Reads use wsutil.Reader straight on the TLS
//	         connection (crypto/tls already buffers one record), answering
//	         control frames with wsutil.ControlFrameHandler.
const (
	clientGorilla        = "gorilla"
	clientGorillaDeflate = "gorilla-deflate" // gorilla with permessage-deflate
	clientGobwas         = "gobwas"

	gorillaBufSize = 1024
	// gobwasBufSize holds a 16 KiB message with the largest frame header.
	gobwasBufSize = 16<<10 + ws.MaxHeaderSize
)

// newWriterPool returns the pool gobwas connections borrow their write
// buffer from for the time of one write, so that an idle connection holds
// none (the way gobwas/pool is used with ws).
func newWriterPool() *sync.Pool {
	return &sync.Pool{New: func() any { return bufio.NewWriterSize(nil, gobwasBufSize) }}
}

// wsConn is one upgraded connection, as seen by the workloads.
type wsConn interface {
	// writeMessage sends msg as one binary message. msg is not modified,
	// so one payload can be shared by every connection.
	writeMessage(msg []byte, deadline time.Time) error
	// readMessage reads one message, streaming it through buf, and
	// returns its length: a message of any size takes len(buf) bytes.
	readMessage(buf []byte, deadline time.Time) (int, error)
	close() error
}

// upgrade performs the WebSocket upgrade of path on tc with the named
// client; gobwas connections borrow write buffers from writers.
func upgrade(ctx context.Context, client string, tc *tls.Conn, host, path string, writers *sync.Pool) (wsConn, error) {
	switch client {
	case clientGorilla:
		return upgradeGorilla(ctx, tc, host, path, false)
	case clientGorillaDeflate:
		return upgradeGorilla(ctx, tc, host, path, true)
	case clientGobwas:
		return upgradeGobwas(ctx, tc, host, path, writers)
	default:
		return nil, fmt.Errorf("unknown -client %q (want %s, %s or %s)", client, clientGorilla, clientGorillaDeflate, clientGobwas)
	}
}

// gorillaConn is a gorilla/websocket connection.
type gorillaConn struct{ ws *websocket.Conn }

func upgradeGorilla(ctx context.Context, tc *tls.Conn, host, path string, deflate bool) (wsConn, error) {
	d := websocket.Dialer{
		// gorilla-deflate offers permessage-deflate (gorilla asks for no
		// context takeover both ways) and compresses every message.
		EnableCompression: deflate,
		// The TLS connection is already established: hand it over.
		NetDialTLSContext: func(context.Context, string, string) (net.Conn, error) { return tc, nil },
		ReadBufferSize:    gorillaBufSize,
		WriteBufferSize:   gorillaBufSize,
	}
	c, resp, err := d.DialContext(ctx, "wss://"+host+path, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	return gorillaConn{ws: c}, nil
}

func (c gorillaConn) writeMessage(msg []byte, dl time.Time) error {
	_ = c.ws.SetWriteDeadline(dl)
	return c.ws.WriteMessage(websocket.BinaryMessage, msg)
}

func (c gorillaConn) readMessage(buf []byte, dl time.Time) (int, error) {
	_ = c.ws.SetReadDeadline(dl)
	_, r, err := c.ws.NextReader()
	if err != nil {
		return 0, err
	}
	return drain(r, buf)
}

func (c gorillaConn) close() error { return c.ws.Close() }

// gobwasConn is a gobwas/ws connection: the TLS connection itself and a
// frame reader; the write buffer is borrowed per message.
type gobwasConn struct {
	tc      *tls.Conn
	rd      *wsutil.Reader
	writers *sync.Pool
	hdr     [ws.MaxHeaderSize]byte
}

func upgradeGobwas(ctx context.Context, tc *tls.Conn, host, path string, writers *sync.Pool) (wsConn, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(dl)
		defer func() { _ = tc.SetDeadline(time.Time{}) }()
	}
	u := &url.URL{Scheme: "wss", Host: host, Path: path}
	br, _, err := ws.Dialer{}.Upgrade(tc, u)
	if err != nil {
		return nil, err
	}
	// Bytes the server sent right after its 101 (an early echo) are in br.
	var src io.Reader = tc
	if br != nil {
		src = io.MultiReader(br, tc)
	}
	c := &gobwasConn{tc: tc, writers: writers}
	c.rd = &wsutil.Reader{
		Source: src,
		State:  ws.StateClientSide,
		// Pings are answered, a close is returned as an error.
		OnIntermediate: wsutil.ControlFrameHandler(tc, ws.StateClientSide),
	}
	return c, nil
}

func (c *gobwasConn) writeMessage(msg []byte, dl time.Time) error {
	_ = c.tc.SetWriteDeadline(dl)
	bw := c.writers.Get().(*bufio.Writer)
	bw.Reset(c.tc)
	defer func() {
		bw.Reset(nil)
		c.writers.Put(bw)
	}()
	mask := ws.NewMask()
	h := ws.Header{Fin: true, OpCode: ws.OpBinary, Masked: true, Mask: mask, Length: int64(len(msg))}
	if err := ws.WriteHeaderBuffer(bw, h, c.hdr[:]); err != nil {
		return err
	}
	// Mask the payload in the write buffer itself (RFC 6455 section 5.3),
	// one buffer's worth at a time: msg stays untouched and no copy of a
	// large message is ever held.
	for pos := 0; pos < len(msg); {
		if bw.Available() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		b := bw.AvailableBuffer()
		n := min(cap(b), len(msg)-pos)
		b = append(b, msg[pos:pos+n]...)
		ws.Cipher(b, mask, pos)
		if _, err := bw.Write(b); err != nil {
			return err
		}
		pos += n
	}
	return bw.Flush()
}

func (c *gobwasConn) readMessage(buf []byte, dl time.Time) (int, error) {
	_ = c.tc.SetReadDeadline(dl)
	for {
		h, err := c.rd.NextFrame()
		if err != nil {
			return 0, err
		}
		if h.OpCode.IsControl() {
			// Handled by OnIntermediate only within a fragmented message.
			if err := c.rd.OnIntermediate(h, c.rd); err != nil {
				return 0, err
			}
			continue
		}
		return drain(c.rd, buf)
	}
}

// close closes the connection without a close frame, as gorilla's Close
// does, so that both clients cost the proxy the same at the end.
func (c *gobwasConn) close() error { return c.tc.Close() }

// drain reads r to its end through buf and returns the bytes read.
func drain(r io.Reader, buf []byte) (int, error) {
	n := 0
	for {
		m, err := r.Read(buf)
		n += m
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

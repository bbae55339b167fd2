package proxy

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
)

// TestKeyUpdateFloodIsBackpressured: a TLS 1.3 client that sends KeyUpdate
// messages asking for an update (RFC 8446 §4.6.3), each of which makes the
// edge's crypto/tls write a KeyUpdate back, and never reads, must be
// stopped by backpressure: the edge stops reading it instead of queueing
// answers for as long as it sends. Go's TLS client cannot send KeyUpdate,
// so the test writes the records itself with the client's traffic secret,
// taken from the standard key log.
//
// On edge's own record layer (tls/record) the answers to all the requests
// one read finds are one KeyUpdate (RFC 8446 §4.6.3 asks for one before
// the next application data), so the queue grows by one small record per
// read instead of one per request, and the kernel's buffers take those
// for gigabytes: there the flood must be held with the queue bounded and
// the connection open (TestKeyUpdateFloodRecordLayer).
func TestKeyUpdateFloodIsBackpressured(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		keyUpdateFlood(t, sp, true)
	})
}

// TestKeyUpdateFloodRecordLayer is the same flood against edge's record
// layer: nothing closed, the queue towards the client at most one read's
// answer over the cap, the record layer still in charge.
func TestKeyUpdateFloodRecordLayer(t *testing.T) {
	keyUpdateFlood(t, spliceReadiness, false)
}

func keyUpdateFlood(t *testing.T, sp splicePath, cryptoTLS bool) {
	{
		addr := sinkBackend(t)
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		p.WriteTimeout = time.Minute // the stuck client is not reaped while measured
		e := startEdge(t, edgeConfig{splice: sp, tls: true, cryptoTLS: cryptoTLS, opts: Options{Routes: []Route{{Default: true, Pool: p}}}, wrap: smallBuffers})

		// Small send buffers on both ends (no autotuning), so that
		// backpressure shows after kilobytes rather than megabytes.
		rc := dialRecordClient(t, e.addr, e.certs, func(tc *net.TCPConn) { tc.SetWriteBuffer(32 << 10) })
		tc, w := rc.tc, rc.w
		if readinessExpected(sp) {
			testkit.WaitFor(t, "the readiness splice to take the connection", func() bool { return e.srv.readyConns() == 1 })
		}

		// 16 KeyUpdates (crypto/tls allows 16 records in a row without
		// application data) and one WebSocket frame, repeated.
		keyUpdate := []byte{24, 0, 0, 1, 1} // KeyUpdate, update_requested
		frame := testkit.MaskedFrame(0x2, []byte("x"))
		limit := 16 << 20
		if !cryptoTLS {
			limit = 4 << 20 // nothing grows here; a few MiB show it
		}
		// A write stalled for 2 s stands for "the edge stopped reading".
		// On the readiness splice that must be the queue's cap, which
		// shows: a stall short of it is a slow machine, and the rest of
		// the batch goes out (whole records, the stream stays intact)
		// until the cap shows or a minute has passed.
		pushedBack := func() bool { return !readinessExpected(sp) || e.srv.maxClientQueue() > clientQueueCap }
		giveUp := time.Now().Add(time.Minute)
		sent := 0
		var batch []byte
	flood:
		for sent < limit {
			batch = batch[:0]
			for len(batch) < 16<<10 {
				for range 16 {
					batch = w.seal(batch, 22, keyUpdate)
					w.update()
				}
				batch = w.seal(batch, 23, frame)
			}
			for off := 0; off < len(batch); {
				tc.SetWriteDeadline(time.Now().Add(2 * time.Second))
				n, err := tc.Write(batch[off:])
				off += n
				sent += n
				if errors.Is(err, os.ErrDeadlineExceeded) {
					if pushedBack() || time.Now().After(giveUp) {
						break flood // the edge stopped reading: backpressure
					}
					continue
				}
				if err != nil {
					t.Fatalf("after %d bytes the edge closed the connection: %v", sent, err)
				}
			}
		}
		if !cryptoTLS {
			if n := e.srv.recordConns(); n != 1 {
				t.Fatalf("%d connections on the record layer, want 1", n)
			}
			if got := e.obs.closedCount(); got != 0 {
				t.Fatalf("%d connections closed; the flood should be held, not cut", got)
			}
			if q := e.srv.maxClientQueue(); q > clientQueueCap+4<<10 {
				t.Fatalf("queue towards the client: %d bytes, over the cap of %d", q, clientQueueCap)
			}
			t.Logf("%d KiB of KeyUpdates held; queue towards the client %d bytes", sent>>10, e.srv.maxClientQueue())
			return
		}
		if sent >= limit {
			t.Fatalf("the edge read %d MiB of KeyUpdates from a client that reads nothing, without pushing back", limit>>20)
		}
		if got := e.obs.closedCount(); got != 0 {
			t.Fatalf("%d connections closed; the flood should be held, not cut", got)
		}
		if readinessExpected(sp) {
			// The cap is what stopped the reading, and each read answers
			// at most 16 KeyUpdates past it.
			if q := e.srv.maxClientQueue(); q <= clientQueueCap || q > clientQueueCap+4<<10 {
				t.Fatalf("queue towards the client: %d bytes, want just over the cap of %d", q, clientQueueCap)
			}
		}
		t.Logf("backpressure after %d KiB sent", sent>>10)
	}
}

// smallBuffers gives accepted sockets a fixed 32 KiB send buffer. Receive
// buffers stay the kernel's: smaller than loopback's 64 KiB MSS they can
// stall a sender on TCP's silly-window avoidance (RFC 1122 §4.2.3.3),
// which looks like backpressure but is not.
func smallBuffers(ln net.Listener) net.Listener {
	return tunedListener{ln, func(tc *net.TCPConn) { tc.SetWriteBuffer(32 << 10) }}
}

// recordClient is a TLS 1.3 client past its upgrade whose next records
// the test writes itself (w, on the raw socket tc), while c (crypto/tls)
// and br still read what edge sends.
type recordClient struct {
	tc net.Conn
	c  *tls.Conn
	br *bufio.Reader
	w  *recordWriter
}

// dialRecordClient connects to addr (prep, when not nil, tunes the socket
// first), sends the upgrade in one record and reads the 101; the client's
// write sequence number is then 1. Go's TLS client cannot send KeyUpdate
// or a bad record: w can, with the client's traffic secret from the key
// log.
func dialRecordClient(t *testing.T, addr string, roots *x509.CertPool, prep func(*net.TCPConn)) *recordClient {
	t.Helper()
	tc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	if prep != nil {
		prep(tc.(*net.TCPConn))
	}
	var keyLog bytes.Buffer
	cfg := testkit.ClientTLS(roots, "edge.test")
	cfg.MinVersion = tls.VersionTLS13
	cfg.KeyLogWriter = &keyLog
	c := tls.Client(tc, cfg)
	if _, err := io.WriteString(c, testkit.RawUpgrade("/", "x")); err != nil {
		t.Fatal(err)
	}
	br := testkit.Read101(t, c)
	w, err := newRecordWriter(c.ConnectionState().CipherSuite, clientSecret(t, keyLog.String()), 1)
	if err != nil {
		t.Skip(err)
	}
	return &recordClient{tc: tc, c: c, br: br, w: w}
}

// clientSecret returns CLIENT_TRAFFIC_SECRET_0 from an NSS key log.
func clientSecret(t *testing.T, log string) []byte {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "CLIENT_TRAFFIC_SECRET_0" {
			b, err := hex.DecodeString(f[2])
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("no client traffic secret in key log %q", log)
	return nil
}

// recordWriter seals TLS 1.3 records (RFC 8446 §5.2) for an AES-GCM suite.
type recordWriter struct {
	hash   func() hash.Hash
	keyLen int
	secret []byte
	aead   cipher.AEAD
	iv     []byte
	seq    uint64
}

func newRecordWriter(suite uint16, secret []byte, seq uint64) (*recordWriter, error) {
	w := &recordWriter{secret: secret, seq: seq}
	switch suite {
	case tls.TLS_AES_128_GCM_SHA256:
		w.hash, w.keyLen = sha256.New, 16
	case tls.TLS_AES_256_GCM_SHA384:
		w.hash, w.keyLen = sha512.New384, 32
	default:
		return nil, errors.New("suite " + tls.CipherSuiteName(suite) + " is not AES-GCM; this test seals only AES-GCM records")
	}
	w.keys()
	return w, nil
}

// expandLabel is HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
func (w *recordWriter) expandLabel(secret []byte, label string, n int) []byte {
	info := binary.BigEndian.AppendUint16(nil, uint16(n))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "+label...)
	info = append(info, 0)
	out, err := hkdf.Expand(w.hash, secret, string(info), n)
	if err != nil {
		panic(err)
	}
	return out
}

func (w *recordWriter) keys() {
	block, err := aes.NewCipher(w.expandLabel(w.secret, "key", w.keyLen))
	if err != nil {
		panic(err)
	}
	if w.aead, err = cipher.NewGCM(block); err != nil {
		panic(err)
	}
	w.iv = w.expandLabel(w.secret, "iv", 12)
}

// update moves to the next traffic secret, as after sending a KeyUpdate
// (RFC 8446 §7.2).
func (w *recordWriter) update() {
	w.secret = w.expandLabel(w.secret, "traffic upd", w.hash().Size())
	w.keys()
	w.seq = 0
}

// seal appends one record carrying msg of content type typ.
func (w *recordWriter) seal(dst []byte, typ byte, msg []byte) []byte {
	inner := append(append([]byte{}, msg...), typ)
	hdr := []byte{23, 3, 3, 0, 0}
	binary.BigEndian.PutUint16(hdr[3:], uint16(len(inner)+w.aead.Overhead()))
	nonce := append([]byte{}, w.iv...)
	for i := range 8 {
		nonce[4+i] ^= byte(w.seq >> (56 - 8*i))
	}
	w.seq++
	dst = append(dst, hdr...)
	return w.aead.Seal(dst, nonce, inner, hdr)
}

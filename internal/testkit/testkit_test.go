package testkit_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync/atomic"
	"testing"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
)

// handshake serves cert on loopback and dials it trusting roots.
func handshake(t *testing.T, cert tls.Certificate, roots *x509.CertPool, name string) error {
	t.Helper()
	addr := testkit.RawBackend(t, func(c net.Conn) {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		_ = tc.Handshake()
	})
	c, err := tls.Dial("tcp", addr, testkit.ClientTLS(roots, name))
	if err == nil {
		c.Close()
	}
	return err
}

func TestCertificatesVerify(t *testing.T) {
	self := testkit.SelfSigned(t, "edge.test", "127.0.0.1")
	if err := handshake(t, self.TLS(), self.Pool(), "edge.test"); err != nil {
		t.Errorf("self-signed by name: %v", err)
	}
	if err := handshake(t, self.TLS(), self.Pool(), "127.0.0.1"); err != nil {
		t.Errorf("self-signed by IP: %v", err)
	}
	ca := testkit.NewCA(t, "test CA")
	leaf := ca.Issue(t, testkit.CertOptions{Hosts: []string{"a.test"}})
	if err := handshake(t, leaf.TLS(), ca.Pool(), "a.test"); err != nil {
		t.Errorf("issued: %v", err)
	}
	if err := handshake(t, leaf.TLS(), self.Pool(), "a.test"); err == nil {
		t.Error("issued leaf verified against another root")
	}
	cf, kf := leaf.Write(t, t.TempDir(), "a")
	kp, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatalf("load written pair: %v", err)
	}
	if len(kp.Certificate) != 2 {
		t.Errorf("file holds %d certificates, want the leaf and the CA", len(kp.Certificate))
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, n := range []int{0, 125, 126, 70000} {
		p := bytes.Repeat([]byte{'x'}, n)
		f := testkit.MaskedFrame(wswire.OpBinary, p)
		op, got := testkit.ReadFrame(t, bufio.NewReader(bytes.NewReader(f)))
		if op != wswire.OpBinary || !bytes.Equal(got, p) {
			t.Errorf("%d bytes: got op %#x, %d bytes", n, op, len(got))
		}
	}
}

func TestRawUpgradeExchange(t *testing.T) {
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, answer := testkit.ReadUpgrade(t, br)
		if req == nil {
			return
		}
		if req.URL.Path != "/x" || req.Header.Get("X-Extra") != "1" {
			t.Errorf("backend got %s %v", req.URL, req.Header)
		}
		c.Write([]byte(answer))
		c.Write(wswire.AppendFrame(nil, wswire.OpText, []byte("hi"), nil))
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(testkit.RawUpgrade("/x", "edge.test", "X-Extra: 1")))
	br := testkit.Read101(t, c)
	if op, p := testkit.ReadFrame(t, br); op != wswire.OpText || string(p) != "hi" {
		t.Errorf("got op %#x %q", op, p)
	}
}

func TestClosedPortRefuses(t *testing.T) {
	c, err := net.Dial("tcp", testkit.ClosedPort(t))
	if err == nil {
		c.Close()
		t.Fatal("dial succeeded")
	}
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	testkit.WaitFor(t, "three looks", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Errorf("looked %d times, want 3", n.Load())
	}
}

// TestClosedPortNeverRepeats: ports handed out in one binary are distinct,
// however often the kernel offers a released one again.
func TestClosedPortNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 500 {
		a := testkit.ClosedPort(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}

package tlscert

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite loads the written pair the way the proxies do and checks that a
// client trusting it reaches both localhost and the given address.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	ip := netip.MustParseAddr("127.0.100.1")
	certPEM, keyPEM, err := Write(dir, ip)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatalf("load the written pair: %v", err)
	}
	// The returned blocks are the files' contents, for a combined file.
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Errorf("returned PEM blocks do not form a pair: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, CertFile)); err != nil || !bytes.Equal(b, certPEM) {
		t.Errorf("%s differs from the returned certificate (err %v)", CertFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"localhost", ip.String()} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: roots}); err == nil {
		t.Error("the certificate is valid for an address it was not made for")
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("%s mode = %v, want 0600", KeyFile, perm)
	}
}

func TestWriteMissingDir(t *testing.T) {
	if _, _, err := Write(filepath.Join(t.TempDir(), "missing"), netip.MustParseAddr("127.0.0.1")); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}

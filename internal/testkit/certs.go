package testkit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// CertOptions describes a certificate to make. The zero value is an ECDSA
// P-256 server certificate valid from an hour ago for a day.
type CertOptions struct {
	// Hosts are the DNS names and IP addresses (SANs); the first is the
	// common name unless CN is set.
	Hosts []string
	// CN overrides the common name.
	CN string
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
	// RSA selects a 2048-bit RSA key (one per test binary: generating
	// them is slow) instead of a fresh ECDSA P-256 key.
	RSA bool
	// ExtKeyUsage defaults to server authentication.
	ExtKeyUsage []x509.ExtKeyUsage
	// OCSPServer is the responder URL named in Authority Information
	// Access (RFC 5280 §4.2.2.1).
	OCSPServer string
	// IssuerURL is the caIssuers URL (RFC 5280 §4.2.2.1).
	IssuerURL string
	// MustStaple adds the TLS Feature extension with status_request
	// (RFC 7633).
	MustStaple bool
}

// Cert is a certificate with its key and the chain sent after it.
type Cert struct {
	Cert  *x509.Certificate
	Key   crypto.Signer
	Chain []*x509.Certificate // issuers sent after the leaf; empty when self-signed
}

// CA is a certificate authority that issues leaves.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// oidTLSFeature is the TLS Feature extension (RFC 7633 §6).
var oidTLSFeature = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 24}

// rsaKey is the one RSA key of the test binary.
var rsaKey = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

// NewCA makes a CA named cn, valid from an hour ago for a year.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t, false)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return &CA{Cert: create(t, tmpl, nil, key, key), Key: key}
}

// Pool is a certificate pool trusting the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a leaf signed by the CA; its chain is the CA.
func (ca *CA) Issue(t testing.TB, o CertOptions) *Cert {
	t.Helper()
	key := newKey(t, o.RSA)
	tmpl := template(t, o)
	return &Cert{Cert: create(t, tmpl, ca.Cert, key, ca.Key), Key: key, Chain: []*x509.Certificate{ca.Cert}}
}

// SelfSigned makes a self-signed server certificate for hosts (DNS names
// or IP addresses), valid from an hour ago for a day. It is marked as a
// CA, so clients other than Go's (OpenSSL, browsers) accept it as its
// own root.
func SelfSigned(t testing.TB, hosts ...string) *Cert {
	t.Helper()
	return SelfSignedWith(t, CertOptions{Hosts: hosts})
}

// SelfSignedWith makes a self-signed certificate as o describes, marked
// as a CA like SelfSigned's.
func SelfSignedWith(t testing.TB, o CertOptions) *Cert {
	t.Helper()
	key := newKey(t, o.RSA)
	tmpl := template(t, o)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage |= x509.KeyUsageCertSign
	return &Cert{Cert: create(t, tmpl, nil, key, key), Key: key}
}

// TLS is the certificate as crypto/tls serves it: the leaf and its chain.
func (c *Cert) TLS() tls.Certificate {
	chain := [][]byte{c.Cert.Raw}
	for _, ca := range c.Chain {
		chain = append(chain, ca.Raw)
	}
	return tls.Certificate{Certificate: chain, PrivateKey: c.Key, Leaf: c.Cert}
}

// Pool is a certificate pool trusting the root of c: the last of its
// chain, or c itself when self-signed.
func (c *Cert) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	if len(c.Chain) > 0 {
		p.AddCert(c.Chain[len(c.Chain)-1])
	} else {
		p.AddCert(c.Cert)
	}
	return p
}

// CertPEM is the leaf followed by its chain, PEM-encoded, as a
// certificate file holds them.
func (c *Cert) CertPEM() []byte {
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Cert.Raw})
	for _, ca := range c.Chain {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
	}
	return b
}

// KeyPEM is the private key as PKCS #8 in PEM.
func (c *Cert) KeyPEM(t testing.TB) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.Key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// Write writes c as name.pem (with its chain) and name.key in dir and
// returns the two paths.
func (c *Cert) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, c.CertPEM())
	WriteFile(t, keyFile, c.KeyPEM(t))
	return certFile, keyFile
}

// WriteFile replaces path atomically (a temporary file renamed over it),
// as a deploy tool should: os.WriteFile truncates first, and a reader
// polling in between would see an empty file.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB, useRSA bool) crypto.Signer {
	t.Helper()
	if useRSA {
		k, err := rsaKey()
		if err != nil {
			t.Fatalf("RSA key: %v", err)
		}
		return k
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("ECDSA key: %v", err)
	}
	return k
}

// serial is a random 64-bit serial number, unique enough that no two
// certificates of a test share one (RFC 5280 §4.1.2.2).
func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatalf("serial: %v", err)
	}
	return n.Add(n, big.NewInt(1))
}

func template(t testing.TB, o CertOptions) *x509.Certificate {
	t.Helper()
	cn := o.CN
	if cn == "" && len(o.Hosts) > 0 {
		cn = o.Hosts[0]
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	if o.ExtKeyUsage == nil {
		o.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  o.ExtKeyUsage,
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if o.RSA {
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment // RSA key exchange, TLS 1.2
	}
	if o.OCSPServer != "" {
		tmpl.OCSPServer = []string{o.OCSPServer}
	}
	if o.IssuerURL != "" {
		tmpl.IssuingCertificateURL = []string{o.IssuerURL}
	}
	if o.MustStaple {
		v, _ := asn1.Marshal([]int{5}) // status_request (RFC 6066 §8)
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, pkix.Extension{Id: oidTLSFeature, Value: v})
	}
	return tmpl
}

// create signs tmpl with signer under parent (tmpl itself when nil).
func create(t testing.TB, tmpl, parent *x509.Certificate, key, signer crypto.Signer) *x509.Certificate {
	t.Helper()
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		t.Fatalf("create certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	return c
}

// Write writes the CA's certificate as name.pem and its key as name.key
// in dir and returns the two paths.
func (ca *CA) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	return (&Cert{Cert: ca.Cert, Key: ca.Key}).Write(t, dir, name)
}

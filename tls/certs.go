package tls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"time"
)

// loadedCert is one parsed, validated certificate pair. It is immutable.
type loadedCert struct {
	files      CertFiles
	tls        tls.Certificate // Leaf set, OCSPStaple empty
	leaf       *x509.Certificate
	issuer     *x509.Certificate // nil when the chain does not carry it
	names      []string          // lower-case DNS SANs
	keyType    string
	mustStaple bool
	id         string // hex SHA-256 of the leaf, names the staple file
	// caIssuers are the leaf's http(s) caIssuers URLs (RFC 5280 section
	// 4.2.2.1), where the issuer is fetched when neither the chain nor an
	// issuer file carries it.
	caIssuers []string
}

// parsePEMCerts returns the CERTIFICATE blocks of data, in order; other
// blocks are skipped.
func parsePEMCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := data
	for i := 1; ; i++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", i, err)
		}
		out = append(out, c)
	}
}

// validity says why lc cannot be served at now: not yet valid or expired.
func validity(lc *loadedCert, now time.Time) error {
	leaf := lc.leaf
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("certificate file %s: not yet valid: valid from %s",
			lc.files.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("certificate file %s: expired at %s", lc.files.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// oidTLSFeature is the TLS Feature extension (RFC 7633); the value 5
// (status_request) in it makes a certificate "must-staple".
var oidTLSFeature = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 24}

const featureStatusRequest = 5

// pairContents is what the files of one pair hold, with a digest of all of
// them, used to tell a real change from a touch.
type pairContents struct {
	cert, key, issuer []byte
	sum               [32]byte
}

// fileContents reads the files of a pair (the issuer file too, when set).
func fileContents(f CertFiles) (pairContents, error) {
	var pc pairContents
	var err error
	pc.cert, err = os.ReadFile(f.CertFile)
	if err != nil {
		return pc, fmt.Errorf("certificate file %s: %w", f.CertFile, err)
	}
	pc.key, err = readSecretFile(f.KeyFile)
	if err != nil {
		return pc, fmt.Errorf("key file %s: %w", f.KeyFile, err)
	}
	if f.IssuerFile != "" {
		pc.issuer, err = os.ReadFile(f.IssuerFile)
		if err != nil {
			return pc, fmt.Errorf("issuer file %s: %w", f.IssuerFile, err)
		}
	}
	h := sha256.New()
	var n [8]byte
	for _, b := range [][]byte{pc.cert, pc.key} {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	h.Write(pc.issuer)
	h.Sum(pc.sum[:0])
	return pc, nil
}

// parsePair validates a pair and says, naming the file, what is wrong:
// no or bad PEM, a key that does not match, a chain out of order, an issuer
// file that holds no issuer of the leaf. Dates are judged apart, by
// validity: an expired pair is served around, not refused.
func parsePair(f CertFiles, pc pairContents) (*loadedCert, error) {
	certPEM, keyPEM := pc.cert, pc.key
	chain, err := parsePEMCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate file %s: %w", f.CertFile, err)
	}
	if len(chain) == 0 {
		if bytes.Contains(certPEM, []byte("PRIVATE KEY-----")) {
			return nil, fmt.Errorf("certificate file %s: no CERTIFICATE PEM block found, only a private key: are cert_file and key_file swapped?", f.CertFile)
		}
		return nil, fmt.Errorf("certificate file %s: no CERTIFICATE PEM block found", f.CertFile)
	}
	leaf := chain[0]
	// A chain out of order makes clients fail in ways that are hard to read;
	// refuse it here instead.
	for i := 0; i+1 < len(chain); i++ {
		if err := chain[i].CheckSignatureFrom(chain[i+1]); err != nil {
			return nil, fmt.Errorf("certificate file %s: certificate %d (%s) is not signed by certificate %d (%s): chain out of order or wrong intermediate: %w",
				f.CertFile, i+1, chain[i].Subject, i+2, chain[i+1].Subject, err)
		}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("key file %s (for certificate file %s): %w", f.KeyFile, f.CertFile, err)
	}
	pair.Leaf = leaf
	lc := &loadedCert{
		files:   f,
		tls:     pair,
		leaf:    leaf,
		keyType: keyType(leaf),
	}
	switch {
	case f.IssuerFile != "":
		lc.issuer, err = issuerFromFile(f, pc.issuer, leaf)
		if err != nil {
			return nil, err
		}
	case len(chain) > 1:
		lc.issuer = chain[1]
	}
	lc.caIssuers = caIssuerURLs(leaf)
	for _, n := range leaf.DNSNames {
		n = normalizeName(n)
		if n != "" && !slices.Contains(lc.names, n) {
			lc.names = append(lc.names, n)
		}
	}
	for _, ext := range leaf.Extensions {
		if !ext.Id.Equal(oidTLSFeature) {
			continue
		}
		var features []int
		if _, err := asn1.Unmarshal(ext.Value, &features); err != nil {
			return nil, fmt.Errorf("certificate file %s: bad TLS feature extension: %w", f.CertFile, err)
		}
		lc.mustStaple = slices.Contains(features, featureStatusRequest)
	}
	sum := sha256.Sum256(leaf.Raw)
	lc.id = hex.EncodeToString(sum[:16])
	return lc, nil
}

func keyType(c *x509.Certificate) string {
	switch c.PublicKey.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA"
	case *rsa.PublicKey:
		return "RSA"
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return "unknown"
}

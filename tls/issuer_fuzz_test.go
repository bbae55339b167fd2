package tls

import (
	"encoding/pem"
	"testing"

	"github.com/edgelb/edge/internal/testkit"
)

// FuzzParseIssuerDoc feeds what a caIssuers URL might serve: the parser must
// never panic, and whatever it returns must be parsed certificates.
func FuzzParseIssuerDoc(f *testing.F) {
	der := testkit.NewCA(f, "fuzz CA").Cert.Raw
	f.Add(der)                                                                  // DER, as RFC 5280 4.2.2.1 asks
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))      // PEM, as some CAs serve
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der[:40]})) // truncated DER in PEM
	f.Add(der[:len(der)-1])                                                     // truncated DER
	f.Add([]byte("<html>not found</html>"))                                     // an error page served with 200
	f.Add([]byte{0x30, 0x82, 0xff, 0xff})                                       // a length beyond the body
	f.Fuzz(func(t *testing.T, body []byte) {
		certs, err := parseIssuerDoc(body)
		if err == nil && len(certs) == 0 {
			t.Fatal("no error and no certificate")
		}
		for _, c := range certs {
			if c == nil || len(c.Raw) == 0 {
				t.Fatal("nil or empty certificate")
			}
		}
	})
}

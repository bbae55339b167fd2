package tls

import (
	"crypto/tls"
	"strings"
)

// ClientIdentity names the verified client certificate of a mutual-TLS
// connection for a request header: the subject common name, else the first
// DNS, e-mail or URI subject alternative name. It returns "" without a
// client certificate. Control characters are dropped so the value is always
// a legal header value (no CR/LF injection through a certificate field).
func ClientIdentity(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return ""
	}
	c := cs.PeerCertificates[0]
	id := c.Subject.CommonName
	switch {
	case id != "":
	case len(c.DNSNames) > 0:
		id = c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		id = c.EmailAddresses[0]
	case len(c.URIs) > 0:
		id = c.URIs[0].String()
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, id)
}

package tls_test

import (
	"crypto/tls"
	"testing"

	edgetls "github.com/edgelb/edge/tls"
)

// Handshakes per second on loopback, client and server in one process:
//
//	go test -run '^$' -bench Handshake -benchmem ./tls
func BenchmarkHandshakeFull(b *testing.B) {
	benchHandshakes(b, false)
}

func BenchmarkHandshakeResumed(b *testing.B) {
	benchHandshakes(b, true)
}

func benchHandshakes(b *testing.B, resume bool) {
	p := newPKI(b)
	ec := p.leaf(b, leafOpts{file: "ec", names: []string{"ec.example.com"}})
	rsa := p.leaf(b, leafOpts{file: "rsa", names: []string{"rsa.example.com"}, rsa: true})
	term, err := edgetls.New(edgetls.Options{
		Certificates: []edgetls.CertFiles{ec.files(), rsa.files()},
		Logger:       discardLogger(),
		OCSP:         edgetls.OCSPOptions{Disabled: true},
	})
	if err != nil {
		b.Fatal(err)
	}
	addr := serve(b, term.TLSConfig(), make(chan tls.ConnectionState))
	cases := []struct {
		name    string
		sni     string
		version uint16
	}{
		{"TLS1.3-ECDSA", "ec.example.com", tls.VersionTLS13},
		{"TLS1.3-RSA", "rsa.example.com", tls.VersionTLS13},
		{"TLS1.2-ECDSA", "ec.example.com", tls.VersionTLS12},
		{"TLS1.2-RSA", "rsa.example.com", tls.VersionTLS12},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			cfg := p.client(c.sni)
			cfg.MinVersion, cfg.MaxVersion = c.version, c.version
			if resume {
				cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
				if _, err := dial(addr, cfg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				cs, err := dial(addr, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if cs.DidResume != resume {
					b.Fatalf("resumed: got %v, want %v", cs.DidResume, resume)
				}
			}
		})
	}
}

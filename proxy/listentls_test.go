package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/edgelb/edge/internal/testkit"
)

// TestListenTLSRefusesAnotherKeyLogWriter: the record layer takes the
// secrets through tls.Config.KeyLogWriter, so a config that already has a
// writer (an operator's SSLKEYLOGFILE, a debugging hook) is refused, and
// nothing is left half set up: the config keeps its own writer.
func TestListenTLSRefusesAnotherKeyLogWriter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var theirs strings.Builder
	cfg := &tls.Config{KeyLogWriter: &theirs}
	got, cc, err := ListenTLS(ln, cfg, nil, nil)
	if !errors.Is(err, ErrKeyLogWriterSet) || got != nil || cc != nil {
		t.Fatalf("ListenTLS with a KeyLogWriter set: %v, %v; want ErrKeyLogWriterSet and nothing else", got, err)
	}
	if w, ok := cfg.KeyLogWriter.(*strings.Builder); !ok || w != &theirs {
		t.Fatalf("the config's writer was replaced by %T", cfg.KeyLogWriter)
	}
}

// TestListenTLSInstallsKeyLog: one call sets the key log on the config and
// returns the listener and the ConnContext the record layer needs; the
// takeover of a TLS 1.3 WebSocket through it is counted (startEdge builds
// every TLS edge of these tests with it, as cmd/edge does).
func TestListenTLSInstallsKeyLog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := &tls.Config{}
	got, cc, err := ListenTLS(ln, cfg, nil, nil)
	if err != nil || got == nil || cc == nil {
		t.Fatalf("ListenTLS: %v %v", got, err)
	}
	if cfg.KeyLogWriter == nil {
		t.Fatal("no key log installed on the config")
	}
	if !readinessOn {
		return
	}
	e, _ := oneBackendEdge(t, spliceReadiness, true, nil)
	c, _ := e.dialWS(t, "/", nil)
	c.Close()
	testkit.WaitFor(t, "the record layer's takeover", func() bool {
		owned, _ := e.srv.RecordLayerTakeovers()
		return owned == 1
	})
}

package tls

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFilesOpenToOthersRefused: a certificate key or a ticket key
// file open to group or others is refused on every (re)load, with its
// mode, so a key rotated in carelessly never replaces the loaded one;
// 0600 and 0400 are read.
func TestSecretFilesOpenToOthersRefused(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "site.pem"), filepath.Join(dir, "site.key")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o620} {
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := fileContents(CertFiles{CertFile: cert, KeyFile: key}); err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), fmt.Sprintf("mode %04o", mode)) {
			t.Errorf("key at %04o: err %v, want a refusal naming %s", mode, err, key)
		}
		if _, err := TicketKeyFile(key).TicketKeys(context.Background()); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("ticket keys at %04o: err %v, want a refusal naming %s", mode, err, key)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := fileContents(CertFiles{CertFile: cert, KeyFile: key}); err != nil {
			t.Errorf("key at %04o: %v", mode, err)
		}
	}
}

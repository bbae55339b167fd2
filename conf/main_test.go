package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMain makes the example's secret files 0600 before any test loads
// testdata/full.yaml: git keeps no mode but the executable bit, so a
// checkout leaves them as the umask says (0644 usually), and edge refuses
// a secret open to group or others (checkSecretFile), as an operator's
// copy must be.
func TestMain(m *testing.M) {
	for _, glob := range []string{"testdata/secrets/*", "testdata/certs/*.key"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			if err := os.Chmod(f, 0o600); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
	os.Exit(m.Run())
}

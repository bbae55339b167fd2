package reporttest

import (
	"strings"
	"testing"
)

// Contains fails t for every one of lines that report does not contain,
// then logs the report once, so that a failure shows what was rendered
// instead.
func Contains(t testing.TB, report string, lines ...string) {
	t.Helper()
	missing := false
	for _, l := range lines {
		if !strings.Contains(report, l) {
			t.Errorf("report lacks %q", l)
			missing = true
		}
	}
	if missing {
		t.Logf("report:\n%s", report)
	}
}

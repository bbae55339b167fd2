package reporttest

import (
	"fmt"
	"testing"
)

// recorder stands in for a test, keeping what Contains reports.
type recorder struct {
	testing.TB
	errors, logs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func TestContains(t *testing.T) {
	const report = "# Title\n\n| a | b |\n"
	var ok recorder
	Contains(&ok, report, "# Title", "| a | b |")
	if len(ok.errors) != 0 || len(ok.logs) != 0 {
		t.Errorf("all lines present: errors %q, logs %q; want none", ok.errors, ok.logs)
	}
	var bad recorder
	Contains(&bad, report, "# Title", "| c |", "## Targets")
	if want := []string{`report lacks "| c |"`, `report lacks "## Targets"`}; fmt.Sprint(bad.errors) != fmt.Sprint(want) {
		t.Errorf("errors = %q, want %q", bad.errors, want)
	}
	if len(bad.logs) != 1 || bad.logs[0] != "report:\n"+report {
		t.Errorf("logs = %q, want the report once", bad.logs)
	}
}

package edge_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExampleConfig keeps the manual's complete example, in
// docs/CONFIGURATION.md, identical to conf/testdata/full.yaml, which the
// conf tests parse and validate.
func TestREADMEExampleConfig(t *testing.T) {
	doc, err := os.ReadFile("docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile("conf/testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "```yaml\n" + strings.TrimRight(string(full), "\n") + "\n```"
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/CONFIGURATION.md does not contain conf/testdata/full.yaml verbatim in a yaml block; update one from the other")
	}
}

package edge_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExampleConfig keeps the README's complete example identical to
// conf/testdata/full.yaml, which the conf tests parse and validate.
func TestREADMEExampleConfig(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile("conf/testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "```yaml\n" + strings.TrimRight(string(full), "\n") + "\n```"
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not contain conf/testdata/full.yaml verbatim in a yaml block; update one from the other")
	}
}

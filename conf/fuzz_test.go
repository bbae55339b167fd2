package conf

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, and that a failure is
// always a non-empty *Errors naming the file.
func FuzzParse(f *testing.F) {
	// The minimal configuration from the package documentation.
	f.Add([]byte(minimal))
	// The complete example: every key, TLS, cookies, Consul, health.
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	// Not YAML at all, and YAML that is not a mapping.
	f.Add([]byte("\x00\xff{[}]: :\t\n- - -"))
	f.Add([]byte("- 1\n- [2]\n- {3: 4}\n"))
	// Deep nesting, in flow and block style, under a known key.
	f.Add([]byte("listeners: " + strings.Repeat("[", 500) + strings.Repeat("]", 500)))
	f.Add([]byte("pools:\n" + strings.Repeat("  - ", 200) + "name: x\n"))
	// Anchors, aliases and a merge key that merges itself.
	f.Add([]byte("log: &l {level: debug, <<: *l}\nlisteners: [&a {address: ':1'}, *a]\n"))
	// Wrong types everywhere, huge numbers, odd durations and CIDRs.
	f.Add([]byte("drain: {window: 1e400, timeout: -0s}\nlimits: {max_connections: 0x8000000000000000}\nlisteners: [{address: '[::1]:0', trusted_proxies: [::ffff:1.2.3.4/200, fe80::1%eth0]}]\n"))
	// Two documents and a duplicate key.
	f.Add([]byte("log: {}\nlog: {}\n---\nx: 1\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			var errs *Errors
			if !errors.As(err, &errs) || len(errs.List) == 0 {
				t.Fatalf("error is not a non-empty *Errors: %#v", err)
			}
			for _, e := range errs.List {
				if e.File != "fuzz.yaml" {
					t.Fatalf("error without the file name: %q", e)
				}
			}
			return
		}
		_ = c.String()
		if err := c.Validate(); err != nil {
			t.Fatalf("a parsed config fails Validate: %v", err)
		}
	})
}

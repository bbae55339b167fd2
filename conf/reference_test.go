package conf

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// referenceRow matches a row of the key tables in docs/CONFIGURATION.md:
// the key in backticks, then its default.
var referenceRow = regexp.MustCompile("^\\| `([a-z_\\[\\]\\.]+)` \\| ([^|]*) \\|")

// TestConfigurationReferenceIsComplete keeps docs/CONFIGURATION.md's
// reference true to the schema: every key of the file (each leaf of
// Config's yaml tags) has a row, every row names a key that exists, and a
// key with a default tag shows that default. A key added to Config without
// a row, or a row left behind by a removed key, fails here.
func TestConfigurationReferenceIsComplete(t *testing.T) {
	b, err := os.ReadFile("../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	inReference := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			inReference = strings.HasPrefix(line, "## Every key")
			continue
		}
		if m := referenceRow.FindStringSubmatch(line); inReference && m != nil {
			if _, dup := documented[m[1]]; dup {
				t.Errorf("docs/CONFIGURATION.md: %s has two rows", m[1])
			}
			documented[m[1]] = m[2]
		}
	}
	schema := map[string]string{} // key -> default tag, "\x00" without one
	schemaKeys(reflect.TypeOf(Config{}), "", schema)
	if len(schema) < 100 {
		t.Fatalf("only %d keys found in Config: the walk is broken", len(schema))
	}
	var missing, unknown []string
	for key, def := range schema {
		cell, ok := documented[key]
		if !ok {
			missing = append(missing, key)
			continue
		}
		if def != "\x00" && !strings.Contains(cell, "`"+def+"`") {
			t.Errorf("docs/CONFIGURATION.md: %s: default %q, the schema's is %q", key, strings.TrimSpace(cell), def)
		}
	}
	for key := range documented {
		if _, ok := schema[key]; !ok {
			unknown = append(unknown, key)
		}
	}
	slices.Sort(missing)
	slices.Sort(unknown)
	for _, k := range missing {
		t.Errorf("docs/CONFIGURATION.md has no row for %s (section \"Every key\")", k)
	}
	for _, k := range unknown {
		t.Errorf("docs/CONFIGURATION.md documents %s, which is no key of the file", k)
	}
}

// schemaKeys records every leaf key under t, written as the reference
// writes it (pools[].websocket.rate.action), with its default tag.
func schemaKeys(t reflect.Type, path string, out map[string]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice {
			path += "[]"
		}
		t = t.Elem()
	}
	for _, f := range fieldsOf(t) {
		sf := t.Field(f.index)
		key := f.key
		if path != "" {
			key = path + "." + f.key
		}
		if isSection(sf.Type) {
			schemaKeys(sf.Type, key, out)
			continue
		}
		def := "\x00"
		if f.hasDf {
			def = f.def
		}
		out[key] = def
	}
}

// isSection reports whether a field of type t is a block of keys (a
// struct of this package, or a list or pointer of one) rather than a value.
func isSection(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeOf(Config{}).PkgPath() &&
		t != durationType && t != prefixType
}

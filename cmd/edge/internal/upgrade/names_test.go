package upgrade

import (
	"bytes"
	"encoding/gob"
	"reflect"
	"strings"
	"testing"
)

// tableflipNames is what tableflip v1.2.3's writeNames sends: one gob of
// [][]string, each name its fileName [3]string copied into a slice.
func tableflipNames(t testing.TB, names [][]string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(names); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestNamesAreTableflips: what an edge built on tableflip passes is read
// here, and what is passed here reads as tableflip's.
func TestNamesAreTableflips(t *testing.T) {
	wire := [][]string{{"listener", "tcp", "127.0.0.1:8443"}, {"fd", HandoffName, ""}}
	got, err := decodeNames(bytes.NewReader(tableflipNames(t, wire)))
	if err != nil {
		t.Fatal(err)
	}
	want := []name{{kindListener, "tcp", "127.0.0.1:8443"}, {kindFile, HandoffName, ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
	ours, err := encodeNames(want)
	if err != nil {
		t.Fatal(err)
	}
	var back [][]string
	if err := gob.NewDecoder(bytes.NewReader(ours)).Decode(&back); err != nil || !reflect.DeepEqual(back, wire) {
		t.Errorf("ours read as tableflip's: %v, %v; want %v", back, err, wire)
	}
	// tableflip sends an empty list, never nil, when it passes nothing.
	if got, err := decodeNames(bytes.NewReader(tableflipNames(t, [][]string{}))); err != nil || len(got) != 0 {
		t.Errorf("no names: %v, %v", got, err)
	}
}

// TestNamesBounded: too many names, too long a part, a name of four
// parts, the same name twice and a list past maxNameBytes are refused.
func TestNamesBounded(t *testing.T) {
	many := make([][]string, maxNames+1)
	for i := range many {
		many[i] = []string{"fd", strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)}
	}
	for what, names := range map[string][][]string{
		"too many":   many,
		"long part":  {{"listener", "tcp", strings.Repeat("a", maxNamePart+1)}},
		"four parts": {{"listener", "tcp", "a", "b"}},
		"twice":      {{"fd", "x", ""}, {"fd", "x"}},
		"huge":       {{"listener", "tcp", strings.Repeat("a", 1000)}, {"fd", strings.Repeat("b", maxNameBytes)}},
	} {
		if got, err := decodeNames(bytes.NewReader(tableflipNames(t, names))); err == nil {
			t.Errorf("%s: decoded %d names, want a refusal", what, len(got))
		}
	}
}

// FuzzDecodeNames: any bytes from the pipe give names within the bounds,
// which encode and decode to themselves, or an error; never a panic.
func FuzzDecodeNames(f *testing.F) {
	f.Add(tableflipNames(f, [][]string{{"listener", "tcp", "127.0.0.1:8443"}, {"fd", HandoffName, ""}}))
	f.Add(tableflipNames(f, [][]string{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := decodeNames(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(names) > maxNames {
			t.Fatalf("%d names", len(names))
		}
		for _, n := range names {
			for _, p := range n {
				if len(p) > maxNamePart {
					t.Fatalf("a part of %d bytes", len(p))
				}
			}
		}
		enc, err := encodeNames(names)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeNames(bytes.NewReader(enc))
		if err != nil || !reflect.DeepEqual(again, names) && len(names) > 0 {
			t.Fatalf("round trip: %v, %v; want %v", again, err, names)
		}
	})
}

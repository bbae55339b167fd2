package handoff

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func sample() *State {
	return &State{
		Listener: "public", Pool: "chat", BackendID: "b1", BackendAddr: "127.0.0.1:9000",
		Method: "GET", Host: "chat.example", Path: "/ws", RequestID: "r-1", TLS: "",
		Client: netip.MustParseAddr("198.51.100.7"), Peer: netip.MustParseAddr("::1"),
		Start: 1_700_000_000_000_000_000, Upgrade: 1_500_000, In: 10, Out: 20, Last: 1_700_000_001_000_000_000,
		Session: []byte{1, 2, 3},
	}
}

// TestStateRoundTrip: what Encode writes, Decode reads back, with and
// without the TLS 1.3 section.
func TestStateRoundTrip(t *testing.T) {
	for _, s := range []*State{sample(), func() *State {
		s := sample()
		s.TLS, s.TLS13 = "TLS 1.3", &TLS13{Record: []byte("keys"), Pending: []byte("tail")}
		return s
	}(), func() *State {
		s := sample()
		s.TLS, s.TLS13 = "TLS 1.3", &TLS13{Record: []byte("keys"), Pending: []byte("tail")}
		s.Token = &Token{Subject: 1 << 63, ID: 7, IssuedAt: 1_800_000_000, Expiry: 1_800_000_600_000_000_000}
		return s
	}()} {
		b, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
		}
	}
}

// TestDecodeRefuses: a record with another version, unknown flags, a
// short or long body, or no pool is refused as malformed.
func TestDecodeRefuses(t *testing.T) {
	good, _ := Encode(sample())
	cases := map[string][]byte{
		"version": func() []byte { b := bytes.Clone(good); b[4] = 2; return b }(),
		"flags":   func() []byte { b := bytes.Clone(good); b[5] = 0x80; return b }(),
		"short":   good[:len(good)-1],
		"long":    append(bytes.Clone(good), 0),
		"magic":   func() []byte { b := bytes.Clone(good); b[0] = 'X'; return b }(),
		"no pool": func() []byte { s := sample(); s.Pool = ""; b, _ := Encode(s); return b }(),
	}
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decode = %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzDecodeState: Decode never panics, and whatever it accepts encodes
// back to the same bytes.
func FuzzDecodeState(f *testing.F) {
	good, _ := Encode(sample())
	f.Add(good) // a whole valid record
	s := sample()
	s.TLS13 = &TLS13{Record: []byte{9}, Pending: []byte{8, 7}}
	withTLS, _ := Encode(s)
	f.Add(withTLS)                                // with the optional TLS 1.3 section
	f.Add(good[:HeaderSize])                      // a header alone
	f.Add(good[:len(good)-3])                     // cut inside the session blob
	f.Add([]byte("EDGH\x01\x00\xff\xff\xff\xff")) // a length over MaxBody
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(st)
		if err != nil {
			t.Fatalf("Encode of a decoded record: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded record differs:\n in %x\nout %x", b, again)
		}
	})
}

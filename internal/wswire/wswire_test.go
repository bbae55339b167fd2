package wswire

import (
	"bytes"
	"testing"
)

func TestAcceptKey(t *testing.T) {
	// RFC 6455 §1.3's example.
	if got, want := AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="; got != want {
		t.Fatalf("AcceptKey: got %q, want %q", got, want)
	}
}

func TestParseHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want Header
	}{
		{"short", []byte{0x81}, Header{}},
		{"7-bit", []byte{0x81, 5}, Header{Fin: true, Opcode: 1, Length: 5, Size: 2}},
		{"16-bit incomplete", []byte{0x82, 126, 1}, Header{}},
		{"16-bit", []byte{0x02, 126, 1, 0}, Header{Opcode: 2, Length: 256, Size: 4}},
		{"64-bit", []byte{0x82, 127, 0, 0, 0, 1, 0, 0, 0, 0}, Header{Fin: true, Opcode: 2, Length: 1 << 32, Size: 10}},
		{"masked", []byte{0x88, 0x82, 1, 2, 3, 4}, Header{Fin: true, Opcode: 8, Masked: true, Length: 2, Size: 6}},
		{"masked incomplete", []byte{0x88, 0x82, 1, 2, 3}, Header{}},
	} {
		got, err := ParseHeader(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v %v, want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := ParseHeader([]byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}); err != ErrLength {
		t.Fatalf("64-bit length with the top bit: got %v, want ErrLength", err)
	}
}

func TestFrames(t *testing.T) {
	var c [4]byte
	if got := CloseFrame(&c, 1001); !bytes.Equal(got, []byte{0x88, 2, 0x03, 0xe9}) {
		t.Fatalf("CloseFrame: % x", got)
	}
	var m [8]byte
	got := MaskedCloseFrame(&m, 1001, [4]byte{1, 2, 3, 4})
	if !bytes.Equal(got, []byte{0x88, 0x82, 1, 2, 3, 4, 0x03 ^ 1, 0xe9 ^ 2}) {
		t.Fatalf("MaskedCloseFrame: % x", got)
	}
	if !bytes.Equal(AppendFrame(nil, OpPing, nil, nil), Ping) {
		t.Fatal("AppendFrame ping differs from Ping")
	}
}

// FuzzHeaderRoundTrip: a header AppendHeader wrote parses back to its
// opcode, length, mask bit and size; ParseHeader never reports a size out
// of range on arbitrary bytes.
func FuzzHeaderRoundTrip(f *testing.F) {
	f.Add([]byte{0x81, 2, 'h', 'i'}, byte(1), uint64(5), true)
	f.Add([]byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, byte(2), uint64(70000), false)
	f.Fuzz(func(t *testing.T, data []byte, op byte, n uint64, masked bool) {
		if h, err := ParseHeader(data); err == nil && h.Size != 0 && (h.Size < 2 || h.Size > MaxHeader || h.Size > len(data)) {
			t.Fatalf("header size %d out of range for %d bytes", h.Size, len(data))
		}
		op &= 0x0f
		n &^= 1 << 63
		var mask *[4]byte
		if masked {
			mask = &[4]byte{9, 8, 7, 6}
		}
		b := AppendHeader(nil, op, n, mask)
		h, err := ParseHeader(b)
		if err != nil || h.Size != len(b) || h.Opcode != op || h.Length != n || h.Masked != masked || !h.Fin {
			t.Fatalf("round trip of op %d len %d masked %v: %+v %v", op, n, masked, h, err)
		}
	})
}

package wswire

import (
	"strconv"
	"strings"
	"testing"
)

const chromiumOffer = "permessage-deflate; client_max_window_bits"

func TestRewriteOffer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vals    []string
		mode    DeflateMode
		bits    int
		want    string
		deflate bool
	}{
		{"pass keeps the offer", []string{chromiumOffer}, DeflatePass, 0, chromiumOffer, true},
		{"pass keeps what it cannot parse", []string{`x; a="`}, DeflatePass, 0, `x; a="`, false},
		{"strip removes deflate", []string{chromiumOffer}, DeflateStrip, 0, "", false},
		{"strip keeps other extensions", []string{"permessage-deflate, x-foo; a=1, x-webkit-deflate-frame"}, DeflateStrip, 0, "x-foo; a=1", false},
		{"only keeps one deflate offer", []string{"permessage-deflate; client_max_window_bits=10, permessage-deflate, x-foo"}, DeflateOnly, 0,
			"permessage-deflate; client_max_window_bits=10", true},
		{"only skips a malformed offer", []string{"permessage-deflate; server_max_window_bits, permessage-deflate; server_no_context_takeover"}, DeflateOnly, 0,
			"permessage-deflate; server_no_context_takeover", true},
		{"cap sets the server window and lowers the client's", []string{chromiumOffer}, DeflatePass, 9,
			"permessage-deflate; server_max_window_bits=9; client_max_window_bits=9", true},
		{"cap keeps a smaller window", []string{"permessage-deflate; server_max_window_bits=10; client_max_window_bits=12"}, DeflateOnly, 11,
			"permessage-deflate; server_max_window_bits=10; client_max_window_bits=11", true},
		{"cap cannot add client_max_window_bits", []string{"permessage-deflate"}, DeflateOnly, 12,
			"permessage-deflate; server_max_window_bits=12", true},
		{"quoted values", []string{`permessage-deflate; client_max_window_bits="10"`}, DeflateOnly, 0,
			"permessage-deflate; client_max_window_bits=10", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, deflate := RewriteOffer(tc.vals, tc.mode, tc.bits)
			if got != tc.want || deflate != tc.deflate {
				t.Fatalf("RewriteOffer(%q) = %q, %v; want %q, %v", tc.vals, got, deflate, tc.want, tc.deflate)
			}
		})
	}
}

func TestRewriteAnswer(t *testing.T) {
	for _, tc := range []struct {
		name        string
		offer, ans  string
		mode        DeflateMode
		bits        int
		want        string
		negotiated  bool
		errContains string
	}{
		{"pass", chromiumOffer, "permessage-deflate; client_max_window_bits=15", DeflatePass, 0, "permessage-deflate; client_max_window_bits=15", true, ""},
		{"declined", chromiumOffer, "", DeflateOnly, 0, "", false, ""},
		{"gorilla to gorilla (the benchmark's pair)", "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover", DeflateOnly, 0,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover", true, ""},
		{"limit keeps the parameters", chromiumOffer, "permessage-deflate; server_no_context_takeover; client_no_context_takeover", DeflateOnly, 0,
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover", true, ""},
		{"cap binds the client", chromiumOffer, "permessage-deflate; server_max_window_bits=9", DeflatePass, 9,
			"permessage-deflate; server_max_window_bits=9; client_max_window_bits=9", true, ""},
		{"cap lowers the client window", chromiumOffer, "permessage-deflate; server_max_window_bits=9; client_max_window_bits=15", DeflateOnly, 10,
			"permessage-deflate; server_max_window_bits=9; client_max_window_bits=10", true, ""},
		{"a backend that ignores the server cap", chromiumOffer, "permessage-deflate; server_no_context_takeover", DeflatePass, 10,
			"permessage-deflate; server_no_context_takeover; client_max_window_bits=10", true, ""},
		{"a backend over the client's own server cap", "permessage-deflate; server_max_window_bits=10", "permessage-deflate", DeflateOnly, 12, "", false, "server_max_window_bits"},
		{"strip: an answer with deflate", chromiumOffer, "permessage-deflate", DeflateStrip, 0, "", false, "not offered"},
		{"only: an extension not offered", chromiumOffer + ", x-foo", "x-foo", DeflateOnly, 0, "", false, "not offered"},
		{"client bits not offered", "permessage-deflate", "permessage-deflate; client_max_window_bits=10", DeflateOnly, 0, "", false, "client_max_window_bits"},
		{"deflate twice", chromiumOffer, "permessage-deflate, permessage-deflate", DeflateOnly, 0, "", false, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ans []string
			if tc.ans != "" {
				ans = []string{tc.ans}
			}
			got, neg, err := RewriteAnswer([]string{tc.offer}, ans, tc.mode, tc.bits)
			if tc.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContains) {
					t.Fatalf("RewriteAnswer(%q) err %v, want one naming %q", tc.ans, err, tc.errContains)
				}
				return
			}
			if err != nil || got != tc.want || neg != tc.negotiated {
				t.Fatalf("RewriteAnswer(%q) = %q, %v, %v; want %q, %v", tc.ans, got, neg, err, tc.want, tc.negotiated)
			}
		})
	}
}

// FuzzRewriteExtensions: whatever a client offers and a backend answers,
// the offer sent holds no compression under strip, one deflate offer
// under only, windows within the cap, and an accepted answer given to the
// client parses, binds the client's window to the cap and names only what
// was offered.
func FuzzRewriteExtensions(f *testing.F) {
	f.Add(chromiumOffer, "permessage-deflate; client_max_window_bits=15", uint8(0), uint8(0))
	f.Add("permessage-deflate; client_max_window_bits, permessage-deflate", "permessage-deflate; server_max_window_bits=10", uint8(2), uint8(10))
	f.Add(`permessage-deflate; client_max_window_bits="9"; server_no_context_takeover, x-webkit-deflate-frame`, "permessage-deflate; server_max_window_bits=9", uint8(1), uint8(9))
	f.Add("x; a=\"b\\\"c\", y", "y", uint8(2), uint8(0))
	f.Fuzz(func(t *testing.T, offer, answer string, mode, bits uint8) {
		m := DeflateMode(mode % 3)
		b := 0
		if bits%8 != 0 {
			b = 8 + int(bits%8) // 9..15
		}
		vals := []string{offer}
		out, _ := RewriteOffer(vals, m, b)
		if m == DeflatePass && b == 0 {
			return // untouched by design
		}
		es, err := ParseExtensions([]string{out})
		if err != nil {
			t.Fatalf("offer %q rewritten to %q, which does not parse: %v", offer, out, err)
		}
		deflates := 0
		for _, e := range es {
			if isDeflateToken(e.Name) {
				deflates++
				if m == DeflateStrip {
					t.Fatalf("strip sent %q", out)
				}
			}
			checkBits(t, e, b, out, true)
		}
		if deflates > 1 && (m == DeflateOnly || b > 0) {
			t.Fatalf("%d deflate offers in %q", deflates, out)
		}
		ans, _, err := RewriteAnswer(vals, []string{answer}, m, b)
		if err != nil {
			return
		}
		aes, err := ParseExtensions([]string{ans})
		if err != nil {
			t.Fatalf("answer %q rewritten to %q, which does not parse: %v", answer, ans, err)
		}
		for _, e := range aes {
			if !offeredName(es, e.Name) {
				t.Fatalf("answer %q names %q, not in offer %q", ans, e.Name, out)
			}
			checkBits(t, e, b, ans, false) // a backend may ignore the cap on its own window
		}
	})
}

func checkBits(t *testing.T, e Extension, b int, in string, server bool) {
	t.Helper()
	if e.Name != PerMessageDeflate || b == 0 {
		return
	}
	for _, q := range e.Params {
		if q.Name == serverMaxWindowBits && server || q.Name == clientMaxWindowBits && q.HasValue {
			if n, _ := strconv.Atoi(q.Value); n > b || n < 8 {
				t.Fatalf("%s=%q over the cap %d in %q", q.Name, q.Value, b, in)
			}
		}
	}
}

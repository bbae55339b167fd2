package fleet

import (
	"bytes"
	"testing"

	"github.com/edgelb/edge/balance"
)

// FuzzParseCookieKeys: whatever a writer of the fleet prefix puts in a
// cookie-key entry, parsing never panics, and what it accepts is within
// the bounds and usable by a pool.
func FuzzParseCookieKeys(f *testing.F) {
	f.Add([]byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\nZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=\n"))
	f.Add([]byte("# comment\n\n  MDEyMzQ1Njc4OWFiY2RlZg==  \n"))
	f.Add([]byte("c2hvcnQ=\n"))
	f.Add([]byte("not base64\n"))
	f.Add(bytes.Repeat([]byte("MDEyMzQ1Njc4OWFiY2RlZg==\n"), MaxCookieKeys+1))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		keys, err := ParseCookieKeys(v)
		if err != nil {
			if keys != nil {
				t.Fatal("keys returned with an error")
			}
			return
		}
		if len(keys) == 0 || len(keys) > MaxCookieKeys {
			t.Fatalf("%d keys accepted", len(keys))
		}
		for _, k := range keys {
			if len(k) < balance.MinCookieKeyLen || len(k) > MaxCookieKeyBytes {
				t.Fatalf("key of %d bytes accepted", len(k))
			}
		}
		p, err := balance.NewPool(balance.PoolOptions{Name: "p", Mode: balance.Cookie})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SetCookieKeys(keys); err != nil {
			t.Fatalf("accepted keys refused by the pool: %v", err)
		}
	})
}

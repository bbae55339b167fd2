package balance_test

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/edgelb/edge/balance"
)

// FuzzCookieLookup checks that no client-sent cookie can name a backend
// unless it is exactly a value the pool issued, and that nothing panics.
func FuzzCookieLookup(f *testing.F) {
	f.Add("")                                      // no cookie
	f.Add("garbage")                               // not base64url
	f.Add("AAAAAAAAAAAAAAAAAAAAAA")                // right length, wrong MAC
	f.Add("b01")                                   // a backend id in clear
	f.Add("10.0.0.2:8080")                         // a backend address in clear
	f.Add("\x00\xff\xfe invalid utf-8 \xc3\x28")   // binary junk
	f.Add("==================================")    // padding only
	f.Add(string(bytes.Repeat([]byte("A"), 4096))) // long value

	current := cookiePool(f, "chat", keyA, keyB)
	old := cookiePool(f, "chat", keyB)
	primary := map[string]*balance.Backend{}
	secondary := map[string]string{} // value -> backend id
	for _, b := range current.Snapshot().Backends {
		primary[b.CookieValue()] = b
		f.Add(b.CookieValue()) // valid, current key
	}
	for _, b := range old.Snapshot().Backends {
		secondary[b.CookieValue()] = b.ID()
		f.Add(b.CookieValue()) // valid, rotated-out key
	}

	f.Fuzz(func(t *testing.T, cookie string) {
		b, isPrimary := current.Snapshot().LookupCookie(cookie)
		res, err := current.Pick(&balance.Request{Cookie: cookie})
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		switch {
		case primary[cookie] != nil:
			if b != primary[cookie] || !isPrimary || res.Backend != b || res.SetCookie {
				t.Fatalf("valid cookie %q: got %v primary=%v pick=%s SetCookie=%v", cookie, b, isPrimary, res.Backend.ID(), res.SetCookie)
			}
		case secondary[cookie] != "":
			if b == nil || b.ID() != secondary[cookie] || isPrimary || res.Backend != b || !res.SetCookie {
				t.Fatalf("old-key cookie %q: got %v primary=%v SetCookie=%v", cookie, b, isPrimary, res.SetCookie)
			}
		default:
			if b != nil {
				t.Fatalf("cookie %q selected %s", cookie, b.ID())
			}
			if !res.SetCookie {
				t.Fatalf("cookie %q: got SetCookie false, want true", cookie)
			}
		}
	})
}

// FuzzUpdate feeds arbitrary member lists ("id,addr,weight" lines) to
// Update: it either succeeds with a sorted, valid snapshot or fails and
// leaves the previous one in place.
func FuzzUpdate(f *testing.F) {
	f.Add("a,10.0.0.1:80,1\nb,10.0.0.2:80,2") // ordinary
	f.Add("b,10.0.0.2:80,0\na,10.0.0.1:80,0") // unsorted, default weights
	f.Add("a,10.0.0.1:80,1\na,10.0.0.2:80,1") // duplicate id
	f.Add(",10.0.0.1:80,1\n,10.0.0.1:80,1")   // duplicate default id
	f.Add("a,,1")                             // empty address
	f.Add("a,x,-5\nb,y,99999999")             // weights out of range
	f.Add("")                                 // empty membership
	f.Add("\xff,\x00,3\n\xff,\x01,3\nz,q,")   // junk bytes
	f.Fuzz(func(t *testing.T, spec string) {
		p := newPool(t, balance.PoolOptions{Mode: balance.ClientIP}, members(2)...)
		var ms []balance.Member
		for line := range bytes.SplitSeq([]byte(spec), []byte("\n")) {
			parts := bytes.SplitN(line, []byte(","), 3)
			m := balance.Member{ID: string(parts[0])}
			if len(parts) > 1 {
				m.Addr = string(parts[1])
			}
			if len(parts) > 2 {
				m.Weight, _ = strconv.Atoi(string(parts[2]))
			}
			ms = append(ms, m)
		}
		before := p.Snapshot()
		err := p.Update(ms)
		s := p.Snapshot()
		if err != nil {
			if !errors.Is(err, balance.ErrInvalidMember) {
				t.Fatalf("error %v does not wrap ErrInvalidMember", err)
			}
			if s != before {
				t.Fatalf("snapshot replaced after a failed update")
			}
			return
		}
		if len(s.Backends) != len(ms) {
			t.Fatalf("got %d backends, want %d", len(s.Backends), len(ms))
		}
		if !slices.IsSortedFunc(s.Backends, func(a, b *balance.Backend) int { return compareIDs(a.ID(), b.ID()) }) {
			t.Fatalf("backends not sorted by id")
		}
		for i, b := range s.Backends {
			if i > 0 && s.Backends[i-1].ID() == b.ID() {
				t.Fatalf("duplicate id %q", b.ID())
			}
			if b.Addr() == "" || b.Weight() < 1 || b.Weight() > balance.MaxWeight {
				t.Fatalf("invalid backend %q addr=%q weight=%d", b.ID(), b.Addr(), b.Weight())
			}
			if s.ByID(b.ID()) != b {
				t.Fatalf("ByID(%q) does not find it", b.ID())
			}
		}
		if len(ms) > 0 {
			if _, err := p.Pick(&balance.Request{}); err != nil {
				t.Fatalf("Pick: %v", err)
			}
		}
	})
}

func compareIDs(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

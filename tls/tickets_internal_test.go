package tls

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"testing"
)

// TestTicketMACIsHMAC: the tickets' MAC from the key's precomputed pad
// states is HMAC-SHA256 under the key's MAC key, for messages around the
// block size and the ticket lengths seen in use, so tickets stay readable
// by every edge that shares the keys whichever way it computes the MAC;
// zero clears the pad states with the key.
func TestTicketMACIsHMAC(t *testing.T) {
	raw := make([]byte, 80)
	rand.Read(raw)
	k, err := newTicketKey(raw, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 55, 56, 63, 64, 65, 119, 120, 200, 1000} {
		msg := make([]byte, n)
		rand.Read(msg)
		want := hmac.New(sha256.New, k.mac[:])
		want.Write(msg)
		if got := k.sum([]byte("prefix"), msg); !bytes.Equal(got, append([]byte("prefix"), want.Sum(nil)...)) {
			t.Fatalf("%d-byte message: MAC %x, want HMAC-SHA256 %x", n, got, want.Sum(nil))
		}
	}
	k.zero()
	if !bytes.Equal(k.macIn, make([]byte, len(k.macIn))) || !bytes.Equal(k.macOut, make([]byte, len(k.macOut))) {
		t.Fatal("zero left the HMAC pad states")
	}
}

package ready

import (
	"reflect"
	"testing"
)

// TestSockSize keeps a Sock within the 80-byte size class: a held
// connection keeps two, and a box holds up to 100,000 connections.
func TestSockSize(t *testing.T) {
	if n := reflect.TypeOf(Sock{}).Size(); n > 80 {
		t.Errorf("Sock is %d bytes, want at most 80", n)
	}
}

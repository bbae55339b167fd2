package consul

import (
	"testing"
	"time"
)

func TestNextIndex(t *testing.T) {
	tests := []struct {
		name        string
		prev, got   uint64
		wantNext    uint64
		wantChanged bool
	}{
		{"first query", 0, 42, 42, true},
		{"timeout, same index", 42, 42, 42, false},
		{"change", 42, 57, 57, true},
		{"index went backwards resets to 0", 57, 12, 0, true},
		{"after reset", 0, 12, 12, true},
		{"zero index is replaced by 1", 42, 0, 1, true},
		{"zero on first query", 0, 0, 1, true},
		{"one stays one", 1, 1, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, changed := NextIndex(tt.prev, tt.got)
			if next != tt.wantNext || changed != tt.wantChanged {
				t.Errorf("NextIndex(%d, %d): got (%d, %v), want (%d, %v)", tt.prev, tt.got, next, changed, tt.wantNext, tt.wantChanged)
			}
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	b := NewBackoff(100*time.Millisecond, 2*time.Second)
	var last time.Duration
	for i := range 20 {
		d := b.Next()
		if d < 100*time.Millisecond || d > 2*time.Second {
			t.Fatalf("step %d: got %v, want within [100ms, 2s]", i, d)
		}
		last = d
	}
	if last < time.Second {
		t.Errorf("after 20 steps: got %v, want at least half of the 2s cap", last)
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Errorf("after reset: got %v, want 100ms", d)
	}
}

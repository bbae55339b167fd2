package balance

import (
	"math"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := NewBucket(2, 3, clock)
	for i := range 3 {
		if ok, _ := b.Take(); !ok {
			t.Fatalf("take %d of the burst refused", i+1)
		}
	}
	if ok, after := b.Take(); ok || after != time.Second {
		t.Fatalf("past the burst: ok %v, retry after %v; want refused, 1s", ok, after)
	}
	now = now.Add(500 * time.Millisecond) // one token at 2/s
	if ok, _ := b.Take(); !ok {
		t.Fatal("refilled token refused")
	}
	if ok, _ := b.Take(); ok {
		t.Fatal("a second token out of half a second at 2/s")
	}
	now = now.Add(time.Hour) // refills up to the burst only
	for i := range 3 {
		if ok, _ := b.Take(); !ok {
			t.Fatalf("take %d after an hour refused", i+1)
		}
	}
	if ok, _ := b.Take(); ok {
		t.Fatal("the bucket held more than its burst")
	}
}

func TestBucketSlowRateWaitsLonger(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBucket(0.25, 0, func() time.Time { return now }) // burst 1
	if ok, _ := b.Take(); !ok {
		t.Fatal("first take refused")
	}
	if ok, after := b.Take(); ok || after != 4*time.Second {
		t.Fatalf("got ok %v after %v, want refused for 4s", ok, after)
	}
}

func TestBucketDisabled(t *testing.T) {
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if b := NewBucket(r, 0, nil); b != nil {
			t.Errorf("NewBucket(%v) = %+v, want nil", r, b)
		}
	}
	var b *Bucket
	if ok, _ := b.Take(); !ok {
		t.Fatal("nil bucket refused")
	}
}

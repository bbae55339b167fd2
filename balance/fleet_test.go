package balance

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestEdgeWeights: the weights sum to 1, each is at least 1/(2n), and
// with no rate at all they are even.
func TestEdgeWeights(t *testing.T) {
	for _, rates := range [][]float64{{0, 0, 0}, {10, 0, 0}, {60, 30, 10}, {math.NaN(), -1, 5}, {1}} {
		w := EdgeWeights(rates)
		var sum float64
		for _, x := range w {
			sum += x
			if x < 1/(2*float64(len(rates)))-1e-12 {
				t.Errorf("%v: weight %v below the floor", rates, x)
			}
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%v: weights %v sum to %v", rates, w, sum)
		}
	}
	if w := EdgeWeights([]float64{0, 0}); w[0] != 0.5 {
		t.Errorf("no rates: %v, want even", w)
	}
}

// TestConnSharesAddUpToTheLimit: edges that read the same published
// counts get shares that add up to at most the limit, whatever the counts
// and the weights.
func TestConnSharesAddUpToTheLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		n := 1 + r.IntN(10)
		limit := int64(r.IntN(1000))
		pub := make([]int64, n)
		rates := make([]float64, n)
		for i := range pub {
			pub[i] = int64(r.IntN(int(limit)/n + 2))
			rates[i] = float64(r.IntN(100))
		}
		w := EdgeWeights(rates)
		var sum, pubSum int64
		for i := range pub {
			sum += ConnShare(limit, pub, i, w[i])
			pubSum += pub[i]
		}
		if sum > max(limit, pubSum) {
			t.Fatalf("limit %d, published %v, weights %v: shares add up to %d", limit, pub, w, sum)
		}
	}
}

// TestFleetOvershootSimulated plays 2,700 clients arriving at three edges
// (60/30/10) against six backends limited to 150 in the fleet, with
// publications every round and, in every round, one edge acting on the
// counts of the round before (a publication still on its way): no
// backend ever goes over 150 × 1.1, and the fleet fills its 900.
func TestFleetOvershootSimulated(t *testing.T) {
	const limit, backends, edges, clients = 150, 6, 3, 2700
	r := rand.New(rand.NewPCG(3, 4))
	active := [edges][backends]int64{}
	pub, prev := active, active
	rates := [edges]float64{}
	split := [edges]float64{0.6, 0.3, 0.1}
	worst := int64(0)
	left := clients
	for round := 0; left > 0 || round < 20; round++ {
		arrivals := min(left, 200)
		left -= arrivals
		var opened [edges]float64
		for range arrivals {
			e := pickEdge(r.Float64(), split[:])
			view := pub
			if e == round%edges {
				view = prev // this edge has not seen the latest publications
			}
			w := EdgeWeights(rates[:])
			for range backends { // a few draws, as picks skip full backends
				b := r.IntN(backends)
				col := make([]int64, edges)
				for i := range edges {
					col[i] = view[i][b]
				}
				if active[e][b] < ConnShare(limit, col, e, w[e]) {
					active[e][b]++
					opened[e]++
					break
				}
			}
		}
		prev, pub = pub, active
		for i := range edges {
			rates[i] = opened[i]
		}
		for b := range backends {
			var sum int64
			for i := range edges {
				sum += active[i][b]
			}
			worst = max(worst, sum)
		}
	}
	var total int64
	for i := range edges {
		for b := range backends {
			total += active[i][b]
		}
	}
	if worst > limit*11/10 {
		t.Errorf("a backend reached %d, over %d × 1.1", worst, limit)
	}
	if total < limit*backends*9/10 {
		t.Errorf("the fleet holds %d of its %d", total, limit*backends)
	}
	t.Logf("worst backend %d of %d; fleet %d of %d", worst, limit, total, limit*backends)
}

func pickEdge(x float64, split []float64) int {
	for i, s := range split {
		if x < s {
			return i
		}
		x -= s
	}
	return len(split) - 1
}

// TestConnShareLimitsTheBackend: a share replaces the pool's limit on this
// edge, 0 admits nothing new, and a negative one restores the pool's.
func TestConnShareLimitsTheBackend(t *testing.T) {
	p, err := NewPool(PoolOptions{Name: "p", MaxConnsPerBackend: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Update([]Member{{ID: "b1", Addr: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	b := p.Snapshot().Backends[0]
	b.SetConnShare(2)
	first, second, third := b.TryAcquire(), b.TryAcquire(), b.TryAcquire()
	if !first || !second || third || b.Available() {
		t.Fatal("a share of 2 admitted more, or fewer")
	}
	if n, shared := b.ConnLimit(); n != 2 || !shared {
		t.Fatalf("ConnLimit %d %v", n, shared)
	}
	b.SetConnShare(0)
	if b.TryAcquire() {
		t.Fatal("a share of 0 admitted one")
	}
	b.SetConnShare(-1)
	if !b.TryAcquire() {
		t.Fatal("the pool's limit of 10 refused a third")
	}
	if got := p.Opened(); got != 3 {
		t.Fatalf("Opened %d, want 3", got)
	}
}

// TestBucketSetRate: a new rate takes effect without refilling the bucket.
func TestBucketSetRate(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBucket(10, 10, func() time.Time { return now })
	for range 10 {
		if ok, _ := b.Take(); !ok {
			t.Fatal("a full bucket refused")
		}
	}
	b.SetRate(1, 0)
	if ok, _ := b.Take(); ok {
		t.Fatal("SetRate refilled the bucket")
	}
	now = now.Add(time.Second)
	if ok, _ := b.Take(); !ok {
		t.Fatal("one second at 1/s gave no token")
	}
	if r, burst := b.Rate(); r != 1 || burst != 1 {
		t.Fatalf("Rate %v %v", r, burst)
	}
}

package ready

import (
	"math/rand/v2"
	"testing"
)

// item is a schedule's item for tests: its slot and a name.
type item struct {
	slot int32
	n    int
}

func (it *item) schedSlot() *int32 { return &it.slot }

// checkSchedule fails unless s is a heap whose items know their places
// and hold exactly the times of want (item -> due; absent: unscheduled).
func checkSchedule(t *testing.T, s *schedule[*item], items []*item, want map[*item]int64) {
	t.Helper()
	if s.len() != len(want) {
		t.Fatalf("len %d, want %d", s.len(), len(want))
	}
	for i, e := range s.h {
		if got := int(*e.item.schedSlot()); got != i+1 {
			t.Fatalf("item %d at index %d has slot %d", e.item.n, i, got)
		}
		if i > 0 && s.h[(i-1)/2].at > e.at {
			t.Fatalf("heap order broken at %d: parent %d > %d", i, s.h[(i-1)/2].at, e.at)
		}
	}
	for _, it := range items {
		if got := s.when(it); got != want[it] {
			t.Fatalf("item %d due %d, want %d", it.n, got, want[it])
		}
	}
}

// popAll visits what is due at now the way the sweeper does (due, then
// drop) and returns the times in the order visited.
func popAll(s *schedule[*item], now int64) []int64 {
	var got []int64
	for {
		it, ok := s.due(now)
		if !ok {
			return got
		}
		got = append(got, s.when(it))
		s.remove(it)
	}
}

// TestScheduleOrder: items come due in time order, only once due, and
// moving one earlier or later or dropping it is honoured.
func TestScheduleOrder(t *testing.T) {
	var s schedule[*item]
	a, b, c, d := &item{n: 1}, &item{n: 2}, &item{n: 3}, &item{n: 4}
	s.set(a, 30)
	s.set(b, 10)
	s.set(c, 20)
	s.set(d, 40)
	if _, ok := s.due(9); ok {
		t.Fatal("an item due before its time")
	}
	s.set(d, 5)  // earlier
	s.set(b, 35) // later
	s.remove(c)
	s.remove(c) // twice: a no-op
	checkSchedule(t, &s, []*item{a, b, c, d}, map[*item]int64{a: 30, b: 35, d: 5})
	if got := popAll(&s, 30); len(got) != 2 || got[0] != 5 || got[1] != 30 {
		t.Fatalf("due at 30: %v, want [5 30]", got)
	}
	s.set(b, 0) // 0 drops
	if s.len() != 0 || b.slot != 0 {
		t.Fatalf("after dropping every item: len %d, slot %d", s.len(), b.slot)
	}
}

// TestScheduleShrinks: a heap that grew for a burst gives most of it
// back once the burst closed.
func TestScheduleShrinks(t *testing.T) {
	var s schedule[*item]
	items := make([]*item, 10*schedShrinkAt)
	for i := range items {
		items[i] = &item{n: i}
		s.set(items[i], int64(i+1))
	}
	for _, it := range items[10:] {
		s.remove(it)
	}
	if c := cap(s.h); c > schedShrinkAt {
		t.Fatalf("capacity %d after 10 of %d items are left, want at most %d", c, len(items), schedShrinkAt)
	}
	checkSchedule(t, &s, items[:10], map[*item]int64{
		items[0]: 1, items[1]: 2, items[2]: 3, items[3]: 4, items[4]: 5,
		items[5]: 6, items[6]: 7, items[7]: 8, items[8]: 9, items[9]: 10,
	})
}

// FuzzSchedule: any sequence of sets, moves, drops and visits keeps the
// heap a heap whose items know their places, and a visit at now yields
// exactly the items due by now, earliest first, as a plain map of due
// times says.
func FuzzSchedule(f *testing.F) {
	f.Add([]byte{0, 10, 1, 20, 2, 5, 3, 0, 4, 15})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 9, 255, 5, 5})
	f.Fuzz(func(t *testing.T, script []byte) {
		var s schedule[*item]
		items := make([]*item, 8)
		for i := range items {
			items[i] = &item{n: i}
		}
		want := map[*item]int64{}
		for i := 0; i+1 < len(script); i += 2 {
			it, arg := items[script[i]%8], int64(script[i+1])
			switch script[i] / 8 % 3 {
			case 0, 1: // set (0: drop)
				s.set(it, arg)
				if arg > 0 {
					want[it] = arg
				} else {
					delete(want, it)
				}
			case 2: // a visit at arg
				got := popAll(&s, arg)
				var due []int64
				for k, at := range want {
					if at <= arg {
						due = append(due, at)
						delete(want, k)
					}
				}
				if len(got) != len(due) {
					t.Fatalf("visit at %d: %v due, want %d items", arg, got, len(due))
				}
				for j := 1; j < len(got); j++ {
					if got[j] < got[j-1] {
						t.Fatalf("visit at %d out of order: %v", arg, got)
					}
				}
			}
			checkSchedule(t, &s, items, want)
		}
	})
}

// TestScheduleRandom: a long random run of FuzzSchedule's operations
// over many items.
func TestScheduleRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s schedule[*item]
	items := make([]*item, 300)
	for i := range items {
		items[i] = &item{n: i}
	}
	want := map[*item]int64{}
	now := int64(0)
	for range 20000 {
		it := items[r.IntN(len(items))]
		switch r.IntN(4) {
		case 0, 1:
			at := now + int64(r.IntN(1000))
			s.set(it, at)
			if at > 0 {
				want[it] = at
			} else {
				delete(want, it)
			}
		case 2:
			s.remove(it)
			delete(want, it)
		case 3:
			now += int64(r.IntN(50))
			prev := int64(0)
			for _, at := range popAll(&s, now) {
				if at > now || at < prev {
					t.Fatalf("visit at %d yielded %d after %d", now, at, prev)
				}
				prev = at
			}
			for k, at := range want {
				if at <= now {
					delete(want, k)
				}
			}
		}
	}
	checkSchedule(t, &s, items, want)
}

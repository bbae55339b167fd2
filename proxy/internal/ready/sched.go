package ready

// schedule is the sweeper's agenda: a binary min-heap of items by the
// unix nanos at which each next needs a visit. Every item knows its own
// place (schedItem), so moving or dropping one costs O(log n) and the
// sweeper's tick costs O(due items · log n), not O(items). It is pure
// and owned by one goroutine (the sweeper's); nothing here is atomic.
type schedule[T schedItem] struct {
	h []schedEntry[T]
}

// schedItem is what a schedule holds: an item with a slot for its place
// in the heap, 0 while it is not scheduled (its zero value), else the
// index plus one.
type schedItem interface {
	schedSlot() *int32
}

// schedEntry keeps the due time next to the item, so that sifting
// compares without following the item's pointer.
type schedEntry[T any] struct {
	at   int64
	item T
}

// schedShrinkAt is the capacity below which the heap never shrinks:
// past it, a heap left at a quarter of its capacity (a burst of closes)
// gives the rest back.
const schedShrinkAt = 1024

// len is the number of scheduled items.
func (s *schedule[T]) len() int { return len(s.h) }

// when is when it is due; 0 when it is not scheduled.
func (s *schedule[T]) when(it T) int64 {
	if i := *it.schedSlot(); i > 0 {
		return s.h[i-1].at
	}
	return 0
}

// set schedules it at at (unix nanos, > 0), moving it if it was already
// scheduled; at <= 0 drops it.
func (s *schedule[T]) set(it T, at int64) {
	if at <= 0 {
		s.remove(it)
		return
	}
	slot := it.schedSlot()
	if *slot == 0 {
		s.h = append(s.h, schedEntry[T]{at: at, item: it})
		*slot = int32(len(s.h))
		s.up(len(s.h) - 1)
		return
	}
	i := int(*slot - 1)
	old := s.h[i].at
	s.h[i].at = at
	if at < old {
		s.up(i)
	} else {
		s.down(i)
	}
}

// remove drops it; a no-op when it is not scheduled.
func (s *schedule[T]) remove(it T) {
	slot := it.schedSlot()
	if *slot == 0 {
		return
	}
	i, last := int(*slot-1), len(s.h)-1
	*slot = 0
	if i != last {
		s.h[i] = s.h[last]
		*s.h[i].item.schedSlot() = int32(i + 1)
	}
	var zero schedEntry[T]
	s.h[last] = zero // no reference kept past the end
	s.h = s.h[:last]
	if i != last {
		s.down(i)
		s.up(i)
	}
	s.shrink()
}

// due returns the earliest item when it is due at now, leaving it
// scheduled: the caller moves (set) or drops (remove) it before asking
// again, or gets it again.
func (s *schedule[T]) due(now int64) (T, bool) {
	if len(s.h) == 0 || s.h[0].at > now {
		var zero T
		return zero, false
	}
	return s.h[0].item, true
}

// shrink gives back most of a heap that emptied: 100,000 connections
// scheduled once need 1.6 MB, kept for ever otherwise.
func (s *schedule[T]) shrink() {
	if c := cap(s.h); c > schedShrinkAt && len(s.h) < c/4 {
		h := make([]schedEntry[T], len(s.h), 2*len(s.h))
		copy(h, s.h)
		s.h = h
	}
}

func (s *schedule[T]) less(i, j int) bool { return s.h[i].at < s.h[j].at }

func (s *schedule[T]) swap(i, j int) {
	s.h[i], s.h[j] = s.h[j], s.h[i]
	*s.h[i].item.schedSlot() = int32(i + 1)
	*s.h[j].item.schedSlot() = int32(j + 1)
}

func (s *schedule[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			return
		}
		s.swap(i, parent)
		i = parent
	}
}

func (s *schedule[T]) down(i int) {
	n := len(s.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

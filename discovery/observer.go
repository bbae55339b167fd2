package discovery

// Observer receives discovery events, typically to feed metrics. Methods are
// called from the watcher's goroutine and must not block.
type Observer interface {
	// Updated reports that a pool was given a new member set.
	Updated(pool string, members int)
	// Error reports a failed query or a failed state write.
	Error(pool string, err error)
}

// nopObserver is the default Observer.
type nopObserver struct{}

func (nopObserver) Updated(string, int) {}
func (nopObserver) Error(string, error) {}

var _ Observer = nopObserver{}

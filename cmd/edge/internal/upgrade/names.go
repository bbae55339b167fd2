package upgrade

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
)

// The wire between an old process and the one it starts is tableflip's
// (github.com/cloudflare/tableflip v1.2.3), so an edge built on tableflip
// upgrades to this one and this one back to it: the new process finds
// sentinelEnv=yes in its environment, writes notifyReady to descriptor 3
// once it serves, reads the names of descriptors 5 and up as one gob of
// [][]string from descriptor 4, then reads that pipe to its end, which
// comes when the old process has exited.
const (
	sentinelEnv = "TABLEFLIP_HAS_PARENT_7DIU3"
	notifyReady = 42
	readyFD     = 3
	namesFD     = 4
	firstFD     = 5
)

// Bounds on what a new process accepts as names from its parent: edge
// passes a few listeners and one socket, so these are generous, and a
// broken parent cannot make the new process take memory or descriptors
// without bound.
const (
	maxNames     = 1024
	maxNamePart  = 1024
	maxNameBytes = 1 << 20
)

// The kinds of name edge gives and takes; tableflip also knows "packet"
// and "conn", which edge neither passes nor claims.
const (
	kindListener = "listener"
	kindFile     = "fd"
)

// name identifies one passed descriptor as tableflip does: kind, then
// network and address for a listener, or the file's name and "" for a
// file.
type name [3]string

func (n name) String() string { return strings.Join(n[:], ":") }

// encodeNames is the gob the new process reads from descriptor 4.
func encodeNames(names []name) ([]byte, error) {
	parts := make([][]string, 0, len(names)) // never nil: gob refuses a nil slice
	for _, n := range names {
		parts = append(parts, []string{n[0], n[1], n[2]})
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(parts); err != nil {
		return nil, fmt.Errorf("names of the passed descriptors: %w", err)
	}
	return b.Bytes(), nil
}

// decodeNames reads the names the parent wrote, at most maxNameBytes of
// them, and checks their count and sizes. It reads nothing past the one
// gob value, so the caller can go on reading the pipe for its end.
func decodeNames(r io.Reader) ([]name, error) {
	var parts [][]string
	if err := gob.NewDecoder(io.LimitReader(r, maxNameBytes)).Decode(&parts); err != nil {
		return nil, fmt.Errorf("names of the inherited descriptors: %w", err)
	}
	if len(parts) > maxNames {
		return nil, fmt.Errorf("names of the inherited descriptors: %d, at most %d", len(parts), maxNames)
	}
	names := make([]name, len(parts))
	seen := make(map[name]bool, len(parts))
	for i, p := range parts {
		if len(p) > len(names[i]) {
			return nil, fmt.Errorf("inherited descriptor %d: a name of %d parts, at most %d", firstFD+i, len(p), len(names[i]))
		}
		for j, s := range p {
			if len(s) > maxNamePart {
				return nil, fmt.Errorf("inherited descriptor %d: a name part of %d bytes, at most %d", firstFD+i, len(s), maxNamePart)
			}
			names[i][j] = s
		}
		if seen[names[i]] {
			return nil, fmt.Errorf("inherited descriptor %d: %s passed twice", firstFD+i, names[i])
		}
		seen[names[i]] = true
	}
	return names, nil
}

// files are the descriptors an upgrade deals in: those inherited from the
// parent and not yet claimed, and those the next upgrade passes on. Every
// *os.File here is this package's own copy, closed by it: a replaced
// entry when it is replaced, the unclaimed inherited ones at Ready, the
// passed ones at Stop or once a new process has taken over.
type files struct {
	mu        sync.Mutex
	inherited map[name]*os.File
	passed    map[name]*os.File
}

// listener returns the inherited listener for network and addr, or nil;
// its descriptor moves on to the next upgrade.
func (fs *files) listener(network, addr string) (net.Listener, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	key := name{kindListener, network, addr}
	f := fs.inherited[key]
	if f == nil {
		return nil, nil
	}
	ln, err := net.FileListener(f) // a duplicate: the caller owns it
	if err != nil {
		return nil, fmt.Errorf("inherited listener %s: %w", addr, err)
	}
	delete(fs.inherited, key)
	fs.putLocked(key, f)
	return ln, nil
}

// take returns the inherited file called n, or nil; it is the caller's,
// and is not passed on.
func (fs *files) take(n string) *os.File {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	key := name{kindFile, n}
	f := fs.inherited[key]
	delete(fs.inherited, key)
	return f
}

// put makes f what the next upgrade passes as key, closing what it
// replaces. f becomes the set's to close.
func (fs *files) put(key name, f *os.File) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.putLocked(key, f)
}

func (fs *files) putLocked(key name, f *os.File) {
	if old := fs.passed[key]; old != nil && old != f {
		_ = old.Close()
	}
	if fs.passed == nil {
		fs.passed = map[name]*os.File{}
	}
	fs.passed[key] = f
}

// drop closes and forgets the passed files keys.
func (fs *files) drop(keys []name) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, k := range keys {
		if f := fs.passed[k]; f != nil {
			_ = f.Close()
			delete(fs.passed, k)
		}
	}
}

// closeInherited closes every inherited descriptor nobody claimed: a
// listener the file no longer names, a file of an older or newer edge.
func (fs *files) closeInherited() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for k, f := range fs.inherited {
		_ = f.Close()
		delete(fs.inherited, k)
	}
}

// closePassed closes this process's copies of what it would pass on.
func (fs *files) closePassed() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for k, f := range fs.passed {
		_ = f.Close()
		delete(fs.passed, k)
	}
}

// withPassed calls start with the names and files to pass, in a stable
// order, while nothing can close or replace them.
func (fs *files) withPassed(start func([]name, []*os.File) error) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	keys := make([]name, 0, len(fs.passed))
	for k := range fs.passed {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	out := make([]*os.File, len(keys))
	for i, k := range keys {
		out[i] = fs.passed[k]
	}
	return start(keys, out)
}

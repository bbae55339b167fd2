package trust

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNotTrusted is wrapped by every refusal of this package.
var ErrNotTrusted = errors.New("not edge's")

// Kind says what a file holds, which decides how private it must be.
type Kind uint8

// Kinds of file.
const (
	// Secret: no access at all for group or others (mode & 0o077 == 0).
	Secret Kind = iota
	// State: nobody else may change it (mode & 0o022 == 0); reading is
	// the operator's choice.
	State
)

// Open opens path for reading if it is edge's (see the package
// documentation) and holds a file of kind k.
func Open(path string, k Kind) (*os.File, error) {
	if err := Dir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := openNoFollow(path)
	if err != nil {
		return nil, refusedOpen(path, err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = fileOK(path, fi, k)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile reads path (at most max bytes) if it is edge's and holds a
// file of kind k.
func ReadFile(path string, k Kind, max int64) ([]byte, error) {
	f, err := Open(path, k)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		clear(b)
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return b, nil
}

// Dir reports whether dir and every directory above it are edge's: owned
// by edge's user or root and writable by nobody else (a sticky
// root-owned directory above dir excepted). A symbolic link on the way
// is followed only if it is edge's or root's (another user's link can be
// pointed elsewhere between this check and the open that trusts it), and
// the directories it leads to are judged as well.
func Dir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return checkDirs(abs)
}

func refusedOpen(path string, err error) error {
	if isLoop(err) {
		return fmt.Errorf("%s: %w: a symbolic link (name the file itself)", path, ErrNotTrusted)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: no such file: %w", path, fs.ErrNotExist)
	}
	return err
}

// WriteFile replaces path with data, for a file edge keeps its state in:
// the directory is made (0700) if missing and must then be edge's (see
// Dir), data goes to a new file created beside path with O_EXCL and mode
// 0600 (os.CreateTemp), is synced, and is renamed over path. So a crash
// leaves the old file or the new one, never half of it, and a symbolic
// link or a file another user left at path is replaced, never written
// through.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	if err := Dir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

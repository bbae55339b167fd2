//go:build unix

package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

func openNoFollow(path string) (*os.File, error) {
	// O_NONBLOCK: a FIFO planted in the file's place opens without
	// waiting for a writer, and is then refused as no regular file.
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }

// owner returns fi's owner, and whether edge may trust it: edge's
// effective user or root.
func owner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, st.Uid == 0 || int(st.Uid) == os.Geteuid()
}

func fileOK(path string, fi fs.FileInfo, k Kind) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %w: not a regular file", path, ErrNotTrusted)
	}
	if uid, ok := owner(fi); !ok {
		return fmt.Errorf("%s: %w: owned by uid %d, not by edge's user (uid %d) or root; chown it", path, ErrNotTrusted, uid, os.Geteuid())
	}
	perm := fi.Mode().Perm()
	if k == Secret && perm&0o077 != 0 {
		return fmt.Errorf("%s: %w: mode %04o lets group or others at a secret; chmod 600 it (or 400)", path, ErrNotTrusted, perm)
	}
	if perm&0o022 != 0 {
		return fmt.Errorf("%s: %w: mode %04o lets group or others change it; chmod go-w it", path, ErrNotTrusted, perm)
	}
	return nil
}

// dirOK judges one directory: first is the file's own.
func dirOK(d string, fi fs.FileInfo, first bool) error {
	uid, ok := owner(fi)
	if !ok {
		return fmt.Errorf("directory %s: %w: owned by uid %d, not by edge's user (uid %d) or root, who could replace what is in it", d, ErrNotTrusted, uid, os.Geteuid())
	}
	perm := fi.Mode().Perm()
	sticky := fi.Mode()&fs.ModeSticky != 0
	if perm&0o022 != 0 && (first || !sticky || uid != 0) {
		return fmt.Errorf("directory %s: %w: mode %04o lets group or others put files in it; chmod go-w it", d, ErrNotTrusted, perm)
	}
	return nil
}

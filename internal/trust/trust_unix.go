//go:build unix

package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// maxLinks bounds the symbolic links one path may pass through, as the
// kernel's MAXSYMLINKS (40) bounds path resolution.
const maxLinks = 40

// checkDirs judges the absolute path abs as the kernel resolves it, one
// component at a time (as OpenSSH's secure_filename judges the real path
// of authorized_keys): every directory passed is edge's, every symbolic
// link followed is owned by edge's user or root, and the directory
// reached is edge's and writable by nobody else, sticky or not. Once all
// of that holds, nobody but edge's user and root can change what abs
// names, so opening it afterwards opens what was judged.
func checkDirs(abs string) error {
	var links int
	real, err := resolveDir(abs, &links)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return fmt.Errorf("directory %s: %w", real, err)
	}
	return dirOK(real, fi, true)
}

// resolveDir returns the path abs resolves to, with no symbolic link in
// it, judging each directory on the way (dirOK) and each link followed.
func resolveDir(abs string, links *int) (string, error) {
	cur := string(filepath.Separator)
	fi, err := os.Lstat(cur)
	if err != nil {
		return "", fmt.Errorf("directory %s: %w", cur, err)
	}
	if err := dirOK(cur, fi, false); err != nil {
		return "", err
	}
	for _, part := range strings.Split(abs, string(filepath.Separator)) {
		switch part {
		case "", ".":
			continue
		case "..":
			// cur holds no link, so its parent by name is its parent on disk.
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", fmt.Errorf("directory %s: %w", next, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if cur, err = followLink(cur, next, fi, links); err != nil {
				return "", err
			}
			continue
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%s: %w: not a directory", next, ErrNotTrusted)
		}
		if err := dirOK(next, fi, false); err != nil {
			return "", err
		}
		cur = next
	}
	return cur, nil
}

// followLink resolves the link at path, found in the directory cur
// (already judged): the link must be edge's or root's, and its target is
// resolved and judged in turn.
func followLink(cur, path string, fi fs.FileInfo, links *int) (string, error) {
	if uid, ok := owner(fi); !ok {
		return "", fmt.Errorf("%s: %w: a symbolic link owned by uid %d, not by edge's user (uid %d) or root, who can point it elsewhere; name the directory itself", path, ErrNotTrusted, uid, os.Geteuid())
	}
	if *links++; *links > maxLinks {
		return "", fmt.Errorf("%s: more than %d symbolic links: %w", path, maxLinks, syscall.ELOOP)
	}
	target, err := os.Readlink(path)
	if err != nil {
		return "", fmt.Errorf("directory %s: %w", path, err)
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(cur, target)
	}
	return resolveDir(target, links)
}

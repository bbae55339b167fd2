//go:build !unix

package trust

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

func openNoFollow(path string) (*os.File, error) { return os.Open(path) }

func isLoop(error) bool { return false }

// fileOK holds only what such a system has a meaning for: a regular
// file.
func fileOK(path string, fi fs.FileInfo, _ Kind) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %w: not a regular file", path, ErrNotTrusted)
	}
	return nil
}

// checkDirs holds, of Dir's rules, what such a system has a meaning for:
// abs and the directories above it are directories.
func checkDirs(abs string) error {
	for d := abs; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("directory %s: %w", d, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w: not a directory", d, ErrNotTrusted)
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

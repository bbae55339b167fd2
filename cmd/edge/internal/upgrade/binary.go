package upgrade

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SelfBinary is the binary this process was started as, made absolute now,
// while the working directory is the one it was started in. It is the path
// (argv[0], found on PATH if bare), not the file: a binary replaced at that
// path (install, mv, a package upgrade) or a symlink pointed at another
// release is what the next upgrade runs, where os.Executable would name the
// symlink's old target. os.Executable is the fallback when argv[0] names
// nothing.
func SelfBinary() string {
	arg0 := os.Args[0]
	if !strings.Contains(arg0, string(filepath.Separator)) {
		if p, err := exec.LookPath(arg0); err == nil {
			arg0 = p
		}
	}
	if abs, err := filepath.Abs(arg0); err == nil {
		if _, err := os.Stat(abs); err == nil {
			return abs
		}
	}
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return arg0
}

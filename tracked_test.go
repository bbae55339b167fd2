package edge_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the size above which a tracked file is refused: the source
// tree's largest files (a go.sum, BENCHMARKS, a recorded benchmark run) are
// far below it, and a built edge is about 25 times over it.
const maxTracked = 1 << 20

// sniffLen is how much of a file is read to tell text from binary; Git's
// own heuristic (buffer_is_binary in xdiff-interface.c) looks for a NUL in
// the first 8000 bytes.
const sniffLen = 8 << 10

// binaryAssets are the tracked files that are binary on purpose.
var binaryAssets = map[string]bool{
	"docs/status-page.png": true, // the status page, shown in README.md
	// Raw DEFLATE streams the session's tests feed as compressed messages
	// (proxy/internal/wsession/midblock_test.go).
	"proxy/internal/wsession/testdata/midblock-1.deflate":      true,
	"proxy/internal/wsession/testdata/midblock-2-head.deflate": true,
}

// executableMagic are the headers of the executables Go builds: ELF, Mach-O
// (32- and 64-bit, either byte order, and universal) and PE (the MZ stub).
var executableMagic = []struct {
	name  string
	magic []byte
}{
	{"ELF", []byte("\x7fELF")},
	{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xce}},
	{"Mach-O", []byte{0xce, 0xfa, 0xed, 0xfe}},
	{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xcf}},
	{"Mach-O", []byte{0xcf, 0xfa, 0xed, 0xfe}},
	{"Mach-O universal", []byte{0xca, 0xfe, 0xba, 0xbe}},
	{"PE", []byte("MZ")},
}

// TestNoTrackedBinaries keeps built binaries and large files out of the
// repository: a built edge was once committed at cmd/edge/edge (25 MB)
// because .gitignore ignored only /edge. Every file git tracks must be
// text (no executable header, no NUL byte in its first 8 KiB) unless it
// is a known binary asset, and no file may be over 1 MiB.
func TestNoTrackedBinaries(t *testing.T) {
	files := trackedFiles(t)
	if len(files) == 0 {
		t.Fatal("git ls-files listed nothing")
	}
	for _, name := range files {
		if problem, err := trackedProblem(name); err != nil {
			t.Error(err)
		} else if problem != "" {
			t.Errorf("%s: %s; remove it (git rm --cached) and ignore it in .gitignore", name, problem)
		}
	}
}

// trackedFiles lists the files of the checkout's index, skipping the test
// where there is no git or no git checkout (a module download, an
// exported tarball).
func trackedFiles(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH: the tracked files cannot be listed")
	}
	if err := exec.Command("git", "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not a git checkout: there are no tracked files to check")
	}
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// trackedProblem says what is wrong with a tracked file, or "" when
// nothing is. A file deleted from the work tree but still in the index is
// not this test's concern.
func trackedProblem(name string) (string, error) {
	f, err := os.Open(filepath.FromSlash(name))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("tracked file %s: %w", name, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("tracked file %s: %w", name, err)
	}
	if !info.Mode().IsRegular() {
		return "", nil // a symlink's target is checked where it is tracked
	}
	if info.Size() > maxTracked {
		return fmt.Sprintf("%d bytes, over the 1 MiB limit", info.Size()), nil
	}
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("tracked file %s: %w", name, err)
	}
	return binaryKind(name, head[:n]), nil
}

// binaryKind names what makes the start of a file binary, or returns ""
// for text and for the allowed binary assets.
func binaryKind(name string, head []byte) string {
	if binaryAssets[name] {
		return ""
	}
	for _, m := range executableMagic {
		if bytes.HasPrefix(head, m.magic) {
			return "an executable (" + m.name + " header)"
		}
	}
	if i := bytes.IndexByte(head, 0); i >= 0 {
		return fmt.Sprintf("binary (a NUL byte at offset %d)", i)
	}
	return ""
}

// TestBinaryKind checks the sniffing on made-up heads, so that the test
// above cannot pass by recognising nothing.
func TestBinaryKind(t *testing.T) {
	for _, c := range []struct {
		name string
		head string
		want bool
	}{
		{"edge", "\x7fELF\x02\x01\x01", true},
		{"edge-darwin", "\xcf\xfa\xed\xfe\x0c\x00\x00\x01", true},
		{"edge.exe", "MZ\x90\x00\x03", true},
		{"data.bin", "abc\x00def", true},
		{"docs/status-page.png", "\x89PNG\r\n\x1a\n\x00\x00", false},
		{"other.png", "\x89PNG\r\n\x1a\n\x00\x00", true},
		{"main.go", "package main\n", false},
		{"README.md", "# MZ is not at the start\n", false},
		{"empty", "", false},
	} {
		if got := binaryKind(c.name, []byte(c.head)) != ""; got != c.want {
			t.Errorf("binaryKind(%q, %q) binary = %v, want %v", c.name, c.head, got, c.want)
		}
	}
}

// TestBuiltCommandsIgnored keeps .gitignore covering where a command's
// binary lands when built with plain `go build` from the repository's root
// or from the command's directory, and the test binaries `go test -c`
// writes, so that `git add .` cannot pick one up again.
func TestBuiltCommandsIgnored(t *testing.T) {
	trackedFiles(t) // skips outside a git checkout
	built := []string{"edge.test", "cmd/edge/edge.test", "edge.exe", "cmd/edge/edge.exe"}
	for _, cmd := range []string{"edge", "edge-backend", "wsclient"} {
		built = append(built, cmd, "cmd/"+cmd+"/"+cmd)
	}
	for _, p := range built {
		// --no-index: whether the path would be ignored, tracked or not.
		if err := exec.Command("git", "check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("%s is not ignored by .gitignore (git check-ignore: %v)", p, err)
		}
	}
	for _, p := range []string{"cmd/edge/main.go", "cmd/wsclient/main.go", "cmd/edge-backend/main.go"} {
		if exec.Command("git", "check-ignore", "-q", "--no-index", p).Run() == nil {
			t.Errorf("%s is ignored by .gitignore: a pattern for a built binary is too broad", p)
		}
	}
}

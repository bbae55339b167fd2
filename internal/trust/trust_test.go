//go:build unix

package trust

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nobody is a uid other than edge's (the tests run as root here; when
// not, chown to another user is refused and those cases are skipped).
const nobody = 65534

func write(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func chown(t *testing.T, p string) {
	t.Helper()
	if err := os.Lchown(p, nobody, nobody); err != nil {
		t.Skipf("chown to uid %d: %v (not root)", nobody, err)
	}
}

// TestOpenRefusesWhatIsNotEdges: each way a file can fail to be edge's is
// refused with the path and the reason; edge's own file is read.
func TestOpenRefusesWhatIsNotEdges(t *testing.T) {
	dir := t.TempDir()
	good := write(t, dir, "good", 0o600)
	if b, err := ReadFile(good, Secret, 1<<10); err != nil || len(b) == 0 {
		t.Fatalf("edge's own secret: %v", err)
	}
	if _, err := ReadFile(write(t, dir, "state", 0o644), State, 1<<10); err != nil {
		t.Fatalf("a state file others may read: %v", err)
	}

	other := write(t, dir, "other", 0o600)
	chown(t, other)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	planted := t.TempDir()
	chown(t, planted)
	sticky := t.TempDir()
	if err := os.Chmod(sticky, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		path string
		kind Kind
		want string
	}{
		"readable by others":               {write(t, dir, "readable", 0o644), Secret, "lets group or others at a secret"},
		"writable by group":                {write(t, dir, "writable", 0o620), State, "lets group or others change it"},
		"owned by another user":            {other, Secret, "owned by uid 65534"},
		"a symbolic link":                  {link, Secret, "a symbolic link"},
		"in a directory open to all":       {write(t, open, "tok", 0o600), Secret, "lets group or others put files in it"},
		"in a directory another user made": {write(t, planted, "tok", 0o600), Secret, "owned by uid 65534"},
		"in a sticky directory":            {write(t, sticky, "tok", 0o600), Secret, "lets group or others put files in it"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadFile(c.path, c.kind, 1<<10)
			if !errors.Is(err, ErrNotTrusted) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Dir(c.path)) {
				t.Fatalf("got %v, want a refusal naming the path and %q", err, c.want)
			}
		})
	}
}

// TestDirAcceptsAStickyRootDirectoryAbove: /tmp (root, 1777) above a
// directory of edge's does not make it another user's.
func TestDirAcceptsAStickyRootDirectoryAbove(t *testing.T) {
	sticky := t.TempDir()
	if err := os.Chmod(sticky, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(sticky, "mine")
	if err := os.Mkdir(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Dir(mine); err != nil {
		t.Fatalf("a directory of edge's under a sticky one: %v", err)
	}
}

// TestWriteFile: a state file is written only into a directory of edge's,
// as a new 0600 file renamed into place, so a symbolic link planted at
// its name is replaced and what it pointed at is left alone.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	victim := write(t, dir, "victim", 0o600)
	path := filepath.Join(dir, "state", "set.json")
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(path, Secret, 1<<10); err != nil || string(b) != "new\n" {
		t.Fatalf("read back: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(victim); string(b) == "new\n" {
		t.Fatal("written through the symbolic link")
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("written file: %v, %v; want a regular file, mode 0600", fi.Mode(), err)
	}
	made := filepath.Join(dir, "made", "deeper", "f")
	if err := WriteFile(made, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Dir(made)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory made: %v, %v; want 0700", fi.Mode(), err)
	}

	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	planted := t.TempDir()
	chown(t, planted)
	for _, d := range []string{open, planted} {
		p := filepath.Join(d, "set.json")
		if err := WriteFile(p, []byte("x")); !errors.Is(err, ErrNotTrusted) || !strings.Contains(err.Error(), d) {
			t.Errorf("write into %s: %v, want a refusal naming it", d, err)
		}
		if entries, _ := os.ReadDir(d); len(entries) != 0 {
			t.Errorf("%s: refused, yet holds %d entries", d, len(entries))
		}
	}
}

// TestDirJudgesSymbolicLinksOnTheWay: a directory named through a
// symbolic link is edge's only if whoever could change the link is: a
// link another user owns in a sticky directory (their link in /tmp) can
// be pointed elsewhere by them between the check and the open, so it is
// refused even while it points at a directory of edge's; a link of edge's
// or root's is followed, and where it leads is judged as well.
func TestDirJudgesSymbolicLinksOnTheWay(t *testing.T) {
	sticky := t.TempDir()
	if err := os.Chmod(sticky, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	mine := t.TempDir()
	if err := os.Mkdir(filepath.Join(mine, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(sticky, "theirs")
	if err := os.Symlink(mine, theirs); err != nil {
		t.Fatal(err)
	}
	chown(t, theirs)
	ours := filepath.Join(sticky, "ours")
	if err := os.Symlink(mine, ours); err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	toOpen := filepath.Join(mine, "to-open")
	if err := os.Symlink(open, toOpen); err != nil {
		t.Fatal(err)
	}

	for _, d := range []string{ours, filepath.Join(ours, "sub")} {
		if err := Dir(d); err != nil {
			t.Errorf("%s, through edge's own link to edge's directory: %v", d, err)
		}
	}
	for name, c := range map[string]struct{ dir, want string }{
		"another user's link":          {theirs, theirs + ": not edge's: a symbolic link owned by uid 65534"},
		"another user's link above":    {filepath.Join(theirs, "sub"), theirs + ": not edge's: a symbolic link owned by uid 65534"},
		"edge's link to an open place": {toOpen, open + ": not edge's: mode 0777 lets group or others put files in it"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Dir(c.dir)
			if !errors.Is(err, ErrNotTrusted) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			}
		})
	}
	if _, err := ReadFile(filepath.Join(theirs, "sub", "f"), Secret, 1<<10); !errors.Is(err, ErrNotTrusted) {
		t.Errorf("a file under another user's link: %v, want refused", err)
	}
}

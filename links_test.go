package edge_test

import (
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink matches an inline link or image target, [text](target "title"),
// and a reference definition, [name]: target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)|(?m)^\s*\[[^\]]+\]:\s*(\S+)`)

// TestDocLinksResolve keeps every relative link of the repository's
// documents pointing at a file or folder of the repository, so that no
// document cites a file that is not there.
func TestDocLinksResolve(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md", "bench/README.md")
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range relativeLinks(string(b)) {
			checked++
			p := filepath.Join(filepath.Dir(doc), filepath.FromSlash(target))
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatal(err)
			}
			if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: link %q leaves the repository", doc, target)
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: link %q: %v", doc, target, err)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link pattern is broken")
	}
}

// relativeLinks returns the link targets of a markdown text outside fenced
// code blocks, without their #fragment, leaving out URLs and links within
// the page.
func relativeLinks(md string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			target := m[1] + m[2]
			if i := strings.IndexByte(target, '#'); i >= 0 {
				target = target[:i]
			}
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, target)
		}
	}
	return out
}

// docsPath matches a file of docs/ named in code or prose.
var docsPath = regexp.MustCompile(`\bdocs/[\w.-]+\.(?:md|png)\b`)

// TestDocsCitedExist checks that every file of docs/ that a Go file, a
// script or a document names (a comment citing docs/ARCHITECTURE.md, a
// report path) is in the repository.
func TestDocsCitedExist(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || path == filepath.Join("bench", "out")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, ref := range docsPath.FindAllString(string(b), -1) {
			if _, err := os.Stat(filepath.FromSlash(ref)); err != nil {
				t.Errorf("%s names %s, which is not in the repository", path, ref)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// goFileName matches a Go file named in a comment: conn.go,
// proxy/internal/wsession/ending.go, crypto/tls/common.go.
var goFileName = regexp.MustCompile(`(?:\b|^)((?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.go)\b`)

// TestGoCommentsNameExistingFiles checks that every Go file a comment
// names is there, so that a comment does not send its reader to a file
// that was renamed, moved or split. A name matches a
// file of the repository whose path ends with it (conn.go,
// wsession/ending.go); a path of the standard library (crypto/tls/common.go)
// matches a file under GOROOT/src; a name starting with "_" is a suffix
// (a _test.go file), not a file.
func TestGoCommentsNameExistingFiles(t *testing.T) {
	repo, err := repoFiles()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	fset := token.NewFileSet()
	for _, p := range repo {
		path := filepath.FromSlash(strings.TrimPrefix(p, "/"))
		if filepath.Ext(path) != ".go" {
			continue
		}
		for _, named := range goFilesNamed(fset, path) {
			checked++
			if !goFileExists(repo, named.name) {
				t.Errorf("%s: a comment names %s, which is not in the repository", named.pos, named.name)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no Go file named in any comment: the pattern is broken")
	}
}

// repoFiles lists the repository's files as "/dir/name", leaving out
// hidden folders, node_modules and the benchmark's output.
func repoFiles() ([]string, error) {
	var repo []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || path == filepath.Join("bench", "out")) {
				return filepath.SkipDir
			}
			return nil
		}
		repo = append(repo, "/"+filepath.ToSlash(path))
		return nil
	})
	return repo, err
}

// goFileExists reports whether name is a file of repo (a path ending with
// it) or, written with its package path, of the standard library.
func goFileExists(repo []string, name string) bool {
	for _, p := range repo {
		if strings.HasSuffix(p, "/"+name) {
			return true
		}
	}
	if !strings.Contains(name, "/") {
		return false
	}
	_, err := os.Stat(filepath.Join(build.Default.GOROOT, "src", filepath.FromSlash(name)))
	return err == nil
}

// namedFile is a Go file a comment names, and where.
type namedFile struct {
	name string
	pos  token.Position
}

// goFilesNamed returns the Go files the comments of the Go file at path
// name, suffixes such as _test.go left out. A file that does not parse
// (testdata) names none: gofmt and vet judge the rest.
func goFilesNamed(fset *token.FileSet, path string) []namedFile {
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	var out []namedFile
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			for _, m := range goFileName.FindAllStringSubmatch(c.Text, -1) {
				if !strings.HasPrefix(m[1], "_") {
					out = append(out, namedFile{m[1], fset.Position(c.Pos())})
				}
			}
		}
	}
	return out
}

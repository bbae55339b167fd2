package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCloseReasonsListed: every CloseReason constant the package declares
// is in CloseReasons exactly once, and no close reason is written as a
// string literal where one is recorded (a literal converts to
// CloseReason silently and would escape the list and the zero-initialised
// series).
func TestCloseReasonsListed(t *testing.T) {
	fset := token.NewFileSet()
	// The reasons are declared in internal/wsession (type Reason) and
	// recorded both there and here.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := filepath.Glob("internal/wsession/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, sess...)
	declared := map[string]bool{}
	takesReason := map[string]int{ // function -> index of its reason argument
		"setReason": 0, "SetReason": 0, "Finish": 0, "closeBoth": 0, "requestClose": 1, "Request": 1, "scheduleCloseLocked": 2,
		"writeReason": 1, "readReason": 1,
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		inspectReasons(t, fset, f, declared, takesReason)
	}
	listed := map[string]int{}
	for _, r := range CloseReasons() {
		listed[string(r)]++
	}
	for r := range declared {
		if listed[r] != 1 {
			t.Errorf("CloseReason %q listed %d times in CloseReasons, want once", r, listed[r])
		}
	}
	for r := range listed {
		if !declared[r] {
			t.Errorf("CloseReasons lists %q, which is no declared constant", r)
		}
	}
	if len(declared) < 13 {
		t.Errorf("found %d CloseReason constants, want at least 13: the parse missed them", len(declared))
	}
}

// TestRejectionsListed: every reason the package answers a request with
// by itself (reject, refuse, rejectBackend, upgrade errors, refused
// requests, plain-leg failures) is listed in Rejections.
func TestRejectionsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, r := range Rejections() {
		listed[r.Reason] = true
	}
	fset := token.NewFileSet()
	for _, name := range []string{"server.go", "upgrade.go", "request.go", "http.go", "handler.go"} {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		check := func(e ast.Expr) {
			if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, _ := strconv.Unquote(lit.Value); s != "" && !listed[s] {
					t.Errorf("%s: reason %s is not in Rejections", fset.Position(lit.Pos()), lit.Value)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && slices.Contains([]string{"reject", "refuse", "rejectBackend"}, sel.Sel.Name) && len(n.Args) >= 3 {
					check(n.Args[2])
				}
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "upgradeError" && len(n.Elts) == 2 {
					check(n.Elts[1])
				}
			case *ast.FuncDecl:
				if n.Name.Name == "invalidRequest" || n.Name.Name == "plainFailure" {
					ast.Inspect(n.Body, func(m ast.Node) bool {
						if r, ok := m.(*ast.ReturnStmt); ok {
							check(r.Results[len(r.Results)-1])
						}
						return true
					})
				}
			}
			return true
		})
	}
}

// inspectReasons collects the CloseReason constants f declares and flags
// string literals passed where a close reason is recorded.
func inspectReasons(t *testing.T, fset *token.FileSet, f *ast.File, declared map[string]bool, takesReason map[string]int) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			if id, ok := n.Type.(*ast.Ident); ok && (id.Name == "CloseReason" || id.Name == "Reason") {
				for _, v := range n.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Value != `""` {
						s, _ := strconv.Unquote(lit.Value)
						declared[s] = true
					}
				}
			}
		case *ast.CallExpr:
			var fn string
			switch f := n.Fun.(type) {
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			case *ast.Ident:
				fn = f.Name
			}
			if i, ok := takesReason[fn]; ok && i < len(n.Args) {
				if lit, ok := n.Args[i].(*ast.BasicLit); ok {
					t.Errorf("%s: %s(%s): use a CloseReason constant", fset.Position(lit.Pos()), fn, lit.Value)
				}
			}
		}
		return true
	})
}

package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const privtestPath = "github.com/bpfbench/bpfbench/internal/privtest"

// skipMethods are testing.TB's skips. A test reaches them only through
// internal/privtest, so that BPFBENCH_REQUIRE_PRIVILEGED and
// BPFBENCH_REQUIRE_ALL can forbid every skip.
var skipMethods = map[string]bool{"Skip": true, "Skipf": true, "SkipNow": true}

// bareSkips returns "file:line: x.Skip" for each use of a Skip, Skipf or
// SkipNow selector in the parsed file that is not privtest's own function
// (whatever name the file imports privtest under). Method values
// (f := t.Skip) count as much as calls.
func bareSkips(fset *token.FileSet, f *ast.File) []string {
	privName := ""
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || p != privtestPath {
			continue
		}
		privName = "privtest"
		if imp.Name != nil {
			privName = imp.Name.Name
		}
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || !skipMethods[sel.Sel.Name] {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && privName != "" && id.Name == privName {
			return true // privtest.Skip and its kin
		}
		found = append(found, fmt.Sprintf("%s: %s.%s", fset.Position(sel.Pos()), exprString(sel.X), sel.Sel.Name))
		return true
	})
	return found
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.CallExpr:
		return exprString(x.Fun) + "()"
	default:
		return fmt.Sprintf("%T", e)
	}
}

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestNoBareSkips fails on a test file of the module that skips with
// t.Skip, t.Skipf or t.SkipNow (or b., tb., ...) instead of through
// internal/privtest, the one helper that CI can turn into a failure.
func TestNoBareSkips(t *testing.T) {
	root := moduleRoot(t)
	exempt := filepath.Join(root, "internal", "privtest")
	files := parseModule(t, root, "_test.go", exempt, func(fset *token.FileSet, f *ast.File, _ []byte) {
		for _, s := range bareSkips(fset, f) {
			t.Errorf("%s: a bare skip, which BPFBENCH_REQUIRE_PRIVILEGED cannot forbid; use privtest.Skip, SkipPrivileged, SkipOptional or RequireTool", s)
		}
	})
	if files < 50 {
		t.Fatalf("only %d test files found under %s: the walk missed the module", files, root)
	}
	t.Logf("%d test files parsed", files)
}

// parseModule parses each file of the module under root whose name ends
// in suffix (the go command's view: no testdata, vendor, hidden or nested
// modules, nor the directory skip) and hands it to fn with its source
// (positions relative to root); it returns the number of files parsed.
func parseModule(t *testing.T, root, suffix, skip string, fn func(*token.FileSet, *ast.File, []byte)) int {
	t.Helper()
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules" ||
				p == skip || fileExists(filepath.Join(p, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, suffix) {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", rel, err)
		}
		files++
		fn(fset, f, src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestBareSkipsDetector(t *testing.T) {
	src := `package x

import (
	"testing"

	pt "github.com/bpfbench/bpfbench/internal/privtest"
)

func TestA(t *testing.T) {
	pt.Skip(t, "fine")
	pt.SkipOptional(t, "fine %d", 1)
	t.Skip("bare")
}

func BenchmarkB(b *testing.B) { b.Skipf("bare %d", 1) }

func helper(tb testing.TB) {
	f := tb.SkipNow
	f()
	sub(tb).Skip()
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x_test.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := bareSkips(fset, f)
	want := []string{"x_test.go:12:2: t.Skip", "x_test.go:15:33: b.Skipf", "x_test.go:18:7: tb.SkipNow", "x_test.go:20:2: sub().Skip"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("bareSkips =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

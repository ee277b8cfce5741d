package layout

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, from its func line to its
// closing brace: past it a function does several jobs, and the reader
// needs names for them. A test may be longer (maxTestLines): a scenario
// told in order reads better than one cut into parts.
const (
	maxFuncLines = 80
	maxTestLines = 120
)

// generated reports whether src carries Go's "Code generated ... DO NOT
// EDIT." line (bpf2go's bindings, the gRPC stubs), which is not ours to
// shape.
func generated(src []byte) bool {
	for _, line := range bytes.SplitN(src, []byte("\n"), 30) {
		if bytes.HasPrefix(line, []byte("// Code generated ")) && bytes.HasSuffix(bytes.TrimSpace(line), []byte("DO NOT EDIT.")) {
			return true
		}
	}
	return false
}

// longFuncs returns "file:line: name (n lines)" for each function
// declaration of f over max lines.
func longFuncs(fset *token.FileSet, f *ast.File, max int) []string {
	var long []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		if n := end.Line - start.Line + 1; n > max {
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = fmt.Sprintf("(%s).%s", typeName(fd.Recv.List[0].Type), name)
			}
			long = append(long, fmt.Sprintf("%s:%d: %s (%d lines)", start.Filename, start.Line, name, n))
		}
	}
	return long
}

func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return "*" + typeName(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return typeName(x.X)
	case *ast.IndexListExpr:
		return typeName(x.X)
	}
	return "?"
}

// TestNoLongFunctions fails on a function of the module over maxFuncLines
// lines (a test's over maxTestLines). Generated files are left out.
func TestNoLongFunctions(t *testing.T) {
	root := moduleRoot(t)
	files := parseModule(t, root, ".go", "", func(fset *token.FileSet, f *ast.File, src []byte) {
		if generated(src) {
			return
		}
		limit := maxFuncLines
		if strings.HasSuffix(fset.Position(f.Pos()).Filename, "_test.go") {
			limit = maxTestLines
		}
		for _, s := range longFuncs(fset, f, limit) {
			t.Errorf("%s: over %d lines; split it into named parts by what they do", s, limit)
		}
	})
	if files < 200 {
		t.Fatalf("only %d Go files found under %s: the walk missed the module", files, root)
	}
}

// The detector itself: a function of 81 lines is long, one of 80 is not.
func TestLongFuncsDetector(t *testing.T) {
	body := func(n int) string { return strings.Repeat("\t_ = 0\n", n-2) }
	src := "package p\n\nfunc short() {\n" + body(maxFuncLines) + "}\n\nfunc (x *T) long() {\n" + body(maxFuncLines+1) + "}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := longFuncs(fset, f, maxFuncLines)
	if len(got) != 1 || !strings.Contains(got[0], "(*T).long (81 lines)") {
		t.Fatalf("longFuncs = %q, want only (*T).long at 81 lines", got)
	}
}

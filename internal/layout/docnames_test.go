package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// goPackage is what a package's non-test files declare: its top-level
// names, and per type its methods and struct fields (embedded ones by their
// type's name, with the package they come from).
type goPackage struct {
	dir      string // repository-relative, slash-separated
	names    map[string]bool
	members  map[string]map[string]bool
	embedded map[string][]embed
}

type embed struct{ pkg, typ string } // pkg "" is the same package; else the import's name

// repoIndex is the repository as the documents may name it: the top-level
// folders that hold Go code, and every Go package by folder and by its
// folder's last element.
type repoIndex struct {
	root    string
	goTops  map[string]bool
	pkgs    map[string]*goPackage
	byShort map[string][]string
}

func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "dist" || strings.HasPrefix(name, "bpfbench-")
}

func buildRepoIndex(t testing.TB, root string) *repoIndex {
	t.Helper()
	idx := &repoIndex{root: root, goTops: map[string]bool{}, pkgs: map[string]*goPackage{}, byShort: map[string][]string{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		idx.goTops[strings.SplitN(rel, "/", 2)[0]] = true
		if strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := idx.pkgs[rel]
		if pkg == nil {
			pkg = &goPackage{dir: rel, names: map[string]bool{}, members: map[string]map[string]bool{}, embedded: map[string][]embed{}}
			idx.pkgs[rel] = pkg
			short := rel[strings.LastIndex(rel, "/")+1:]
			idx.byShort[short] = append(idx.byShort[short], rel)
		}
		pkg.add(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func (g *goPackage) member(typ, name string) {
	if g.members[typ] == nil {
		g.members[typ] = map[string]bool{}
	}
	g.members[typ][name] = true
}

// recvType is a method's receiver type's name: T, *T, T[P], *T[P].
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func (g *goPackage) add(f *ast.File) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				g.names[d.Name.Name] = true
				continue
			}
			if typ := recvType(d.Recv.List[0].Type); typ != "" {
				g.member(typ, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						g.names[n.Name] = true
					}
				case *ast.TypeSpec:
					g.names[s.Name.Name] = true
					g.addMembers(s.Name.Name, s.Type)
				}
			}
		}
	}
}

func (g *goPackage) addMembers(typ string, e ast.Expr) {
	switch x := e.(type) {
	case *ast.StructType:
		for _, fld := range x.Fields.List {
			for _, n := range fld.Names {
				g.member(typ, n.Name)
			}
			if len(fld.Names) == 0 {
				emb := fld.Type
				if s, ok := emb.(*ast.StarExpr); ok {
					emb = s.X
				}
				switch et := emb.(type) {
				case *ast.Ident:
					g.member(typ, et.Name)
					g.embedded[typ] = append(g.embedded[typ], embed{typ: et.Name})
				case *ast.SelectorExpr:
					if pk, ok := et.X.(*ast.Ident); ok {
						g.member(typ, et.Sel.Name)
						g.embedded[typ] = append(g.embedded[typ], embed{pkg: pk.Name, typ: et.Sel.Name})
					}
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range x.Methods.List {
			for _, n := range m.Names {
				g.member(typ, n.Name)
			}
		}
	}
}

// hasMember: a method or field of typ, its own or promoted from an
// embedded type (of this package, or of a project package known by its
// short name).
func (idx *repoIndex) hasMember(g *goPackage, typ, name string, depth int) bool {
	if g.members[typ][name] {
		return true
	}
	if depth > 4 {
		return false
	}
	for _, e := range g.embedded[typ] {
		in := g
		if e.pkg != "" {
			dirs := idx.byShort[e.pkg]
			if len(dirs) != 1 {
				continue
			}
			in = idx.pkgs[dirs[0]]
		}
		if idx.hasMember(in, e.typ, name, depth+1) {
			return true
		}
	}
	return false
}

var (
	backtickSpan = regexp.MustCompile("`([^`]+)`")
	pathLike     = regexp.MustCompile(`^[A-Za-z0-9_.\-/]+$`)
	lineSuffix   = regexp.MustCompile(`:\d+(-\d+)?$`)
	// pkg.Ident, pkg.Type.Member, dir/pkg.Ident; pkg.(*Type).Method too.
	identRef = regexp.MustCompile(`^((?:[a-z0-9_]+/)*[a-z][a-z0-9_]*)\.(?:\(\*?([A-Z]\w*)\)\.)?([A-Z]\w*)(?:\.([A-Za-z]\w*))?(?:\(\))?$`)
)

// checkSpan judges one backticked span: "" when it names what exists or is
// not a form this test checks, else what is missing.
func (idx *repoIndex) checkSpan(span string) string {
	if strings.ContainsAny(span, " *<{$") || strings.Contains(span, "...") {
		return ""
	}
	if m := identRef.FindStringSubmatch(span); m != nil {
		return idx.checkIdent(m[1], m[2], m[3], m[4])
	}
	p := lineSuffix.ReplaceAllString(span, "")
	if !pathLike.MatchString(p) || !strings.Contains(p, "/") || strings.Contains(p, "//") {
		return ""
	}
	if !idx.goTops[strings.SplitN(p, "/", 2)[0]] {
		return ""
	}
	if _, err := os.Stat(filepath.Join(idx.root, filepath.FromSlash(strings.TrimSuffix(p, "/")))); err != nil {
		return "no file or folder " + p
	}
	return ""
}

// checkIdent checks pkg.Ident (or pkg.Type.Member, or pkg.(*Type).Method,
// typ set). A pkg that is no project package, or the short name of several,
// is not checked.
func (idx *repoIndex) checkIdent(pkgRef, typ, ident, member string) string {
	var g *goPackage
	if strings.Contains(pkgRef, "/") {
		g = idx.pkgs[pkgRef]
		if g == nil {
			if idx.goTops[strings.SplitN(pkgRef, "/", 2)[0]] {
				return "no Go package " + pkgRef
			}
			return ""
		}
	} else {
		dirs := idx.byShort[pkgRef]
		if len(dirs) != 1 {
			return ""
		}
		g = idx.pkgs[dirs[0]]
	}
	if typ != "" { // pkg.(*T).M
		return idx.checkIdent(pkgRef, "", typ, ident)
	}
	if !g.names[ident] {
		return "package " + g.dir + " declares no " + ident
	}
	if member != "" && member[0] >= 'A' && member[0] <= 'Z' && !idx.hasMember(g, ident, member, 0) {
		return g.dir + "." + ident + " has no method or field " + member
	}
	return ""
}

// docFiles are the documents whose names are checked.
func docFiles(t testing.TB, root string) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "DESIGN.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(more)
	return append(files, more...)
}

// TestDocNamesExist: every repository path and every exported identifier
// (pkg.Ident, pkg.Type.Member, dir/pkg.Ident) that README.md, DESIGN.md
// and docs/*.md name in backticks exists: the documents name only what
// the code holds.
func TestDocNamesExist(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	idx := buildRepoIndex(t, root)
	spans := 0
	for _, f := range docFiles(t, root) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		inFence := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			if inFence {
				continue
			}
			for _, m := range backtickSpan.FindAllStringSubmatch(line, -1) {
				spans++
				if miss := idx.checkSpan(m[1]); miss != "" {
					t.Errorf("%s:%d: `%s`: %s", rel, i+1, m[1], miss)
				}
			}
		}
	}
	t.Logf("%d backticked spans read; %d Go packages, top-level Go folders %v", spans, len(idx.pkgs), sortedKeys(idx.goTops))
}

func sortedKeys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// TestDocNamesDetector: the checker tells names that exist from names that
// do not, and leaves alone what is not a path or an identifier.
func TestDocNamesDetector(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	idx := buildRepoIndex(t, root)
	for _, c := range []struct {
		span string
		miss bool
	}{
		{"internal/layout", false},
		{"internal/layout/", false},
		{"internal/layout/links_test.go", false},
		{"internal/layout/links_test.go:12", false},
		{"internal/layout/no_such_file.go", true},
		{"internal/nosuchpackage/", true},
		{"feed.Feed", false},
		{"live.NoSuchIdentifier", true},
		{"correlate/critpath.Gap", false},
		{"correlate/critpath.NoSuchIdentifier", true},
		{"critpath.Gap.Excess", false},
		{"critpath.Gap.NoSuchMember", true},
		{"correlate/nosuch.Gap", true},
		{"--spool-mib", false},
		{"live.unwalked_gaps", false},
		{"bpfbench_token_gap_seconds", false},
		{"collectors/<name>/", false},
		{"go test ./...", false},
		{"json.Marshal", false},
	} {
		got := idx.checkSpan(c.span)
		if (got != "") != c.miss {
			t.Errorf("checkSpan(%q) = %q, want a miss: %v", c.span, got, c.miss)
		}
	}
}

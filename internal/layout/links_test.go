package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a markdown link's target: [text](target) or [text]: target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)`)

// TestDocLinksStayInTheRepository: every relative link in README.md,
// DESIGN.md and docs/ (and the markdown beside the code) names a file or
// folder of the repository; none leaves it (a clone has nothing above
// its root).
func TestDocLinksStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && (name == ".git" || name == "dist" || name == "node_modules" || strings.HasPrefix(name, "bpfbench-")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inFence := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			if inFence {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1] + m[2]
				if target == "" || strings.HasPrefix(target, "#") || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				rel, _ := filepath.Rel(root, f)
				p := filepath.Clean(filepath.Join(filepath.Dir(f), target))
				if p != root && !strings.HasPrefix(p, root+string(filepath.Separator)) {
					t.Errorf("%s:%d: %s leaves the repository", rel, i+1, target)
					continue
				}
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s:%d: %s does not resolve: %v", rel, i+1, target, err)
				}
				checked++
			}
		}
	}
	t.Logf("%d links checked in %d markdown files", checked, len(files))
}

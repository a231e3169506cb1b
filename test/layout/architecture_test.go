// Package layout checks the repository against its own documentation.
package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureListsEveryPackage: docs/ARCHITECTURE.md's package table
// (the section "Packages and what they may import")
// has a row for every Go package in the repository, and no row for one
// that is gone. A package is a directory holding .go files, outside
// testdata, hidden directories and bin/.
func TestArchitectureListsEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Packages and what they may import\n")
	if !ok {
		t.Fatal(`docs/ARCHITECTURE.md has no section "## Packages and what they may import"`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]bool{}
	for line := range strings.Lines(table) {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if i := strings.Index(name, "` |"); i > 0 {
				rows[name[:i]] = true
			}
		}
	}
	var pkgs []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			dir, _ := filepath.Rel(root, filepath.Dir(path))
			if p := filepath.ToSlash(dir); !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages under %s: the walk checks too little", len(pkgs), root)
	}
	for _, p := range pkgs {
		if !rows[p] {
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's package table", p)
		}
	}
	for r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which is no package", r)
		}
	}
}

// Package cgrouptest builds fake cgroup v2 trees for tests: a scenario from
// cgroup/testdata/cgroupfs is copied into t.TempDir() (never written in
// place), and Listing renders a tree as "file=value" lines for golden
// comparison. Only tests import it.
package cgrouptest

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Tree copies scenario into a temporary directory and returns its path.
func Tree(t testing.TB, scenario string) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "testdata", "cgroupfs", scenario)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("cgrouptest: copy scenario %s: %v", scenario, err)
	}
	return dst
}

// Listing returns "group/file=value" lines (sorted) for the files under
// dir/group named one of names, or for every file when names is empty.
func Listing(t testing.TB, dir, group string, names ...string) string {
	t.Helper()
	var lines []string
	base := filepath.Join(dir, group)
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if len(names) > 0 && !slices.Contains(names, name) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		lines = append(lines, rel+"="+strings.TrimSpace(string(b)))
		return nil
	})
	if err != nil {
		t.Fatalf("cgrouptest: list %s: %v", base, err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

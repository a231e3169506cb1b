package checkpoint_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/nodeagent/checkpoint"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

func TestRoundTripAndCorruption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := checkpoint.Load(dir); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Load of an empty dir = %v, want ErrNone", err)
	}
	s := checkpoint.State{Host: "h1", Revision: 12, ShareBase: 100, CPUs: cpuset.MustParseCPUs("0-3"), Desired: []model.Instance{{ID: "web-1", Service: "web",
		Host: "h1", Spec: model.Spec{Image: "abc"}, Generation: 3, Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 2: 70}, Memory: 1 << 20}}}}
	if err := checkpoint.Save(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	p := filepath.Join(dir, checkpoint.FileName)
	b, _ := os.ReadFile(p)
	for name, bad := range map[string]string{
		"flipped byte": strings.Replace(string(b), `"abc"`, `"abd"`, 1),
		"version":      strings.Replace(string(b), `"version":2`, `"version":9`, 1),
		"junk":         "{not json",
	} {
		os.WriteFile(p, []byte(bad), 0o600)
		if _, err := checkpoint.Load(dir); err == nil || errors.Is(err, checkpoint.ErrNone) {
			t.Errorf("%s: Load = %v, want an error", name, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

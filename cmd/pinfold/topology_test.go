package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

const fixtures = "../../numa/testdata"

// topologyFile writes `pinfold topology -o json` of the sysfs fixture
// named fixture to a file and returns its path, for host add.
func topologyFile(t *testing.T, fixture string) string {
	t.Helper()
	out, errOut, code := runCLI(t, "", "topology", "--sysfs-root", filepath.Join(fixtures, "sysfs", fixture), "-o", "json")
	if code != 0 {
		t.Fatal(errOut)
	}
	path := filepath.Join(t.TempDir(), fixture+".json")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTopologyFixtures runs `pinfold topology` on every fixture, in both
// formats, and checks the JSON fields scripts rely on.
func TestTopologyFixtures(t *testing.T) {
	t.Parallel()
	dirs, _ := filepath.Glob(filepath.Join(fixtures, "sysfs", "*"))
	if len(dirs) < 8 {
		t.Fatalf("found %d fixtures", len(dirs))
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := []string{"topology", "--sysfs-root", dir}
			if _, err := os.Stat(filepath.Join(fixtures, "proc", name)); err == nil {
				args = append(args, "--proc-root", filepath.Join(fixtures, "proc", name))
			}
			out, errOut, code := runCLI(t, "", append(args, "-o", "json")...)
			if code != 0 {
				t.Fatalf("pinfold %v = exit %d, stderr %s", args, code, errOut)
			}
			var doc struct {
				NUMANodes []struct {
					ID          *int           `json:"id"`
					CPUs        *string        `json:"cpus"`
					MemoryBytes *int64         `json:"memory_bytes"`
					Distances   map[string]int `json:"distances"`
				} `json:"numa_nodes"`
				CPUs []struct {
					ID        *int    `json:"id"`
					CoreID    *int    `json:"core_id"`
					PackageID *int    `json:"package_id"`
					NUMANode  *int    `json:"numa_node"`
					Siblings  *string `json:"siblings"`
					L3        *string `json:"l3"`
				} `json:"cpus"`
				Online *string `json:"online"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if doc.Online == nil || *doc.Online == "" || len(doc.NUMANodes) == 0 || len(doc.CPUs) == 0 {
				t.Fatalf("JSON lacks online/numa_nodes/cpus: %s", out)
			}
			for _, n := range doc.NUMANodes {
				if n.ID == nil || n.CPUs == nil || n.MemoryBytes == nil || *n.MemoryBytes <= 0 || n.Distances[""+itoa(*n.ID)] != 10 {
					t.Errorf("numa node entry incomplete: %+v", n)
				}
			}
			for _, c := range doc.CPUs {
				if c.ID == nil || c.CoreID == nil || c.PackageID == nil || c.NUMANode == nil || c.Siblings == nil || c.L3 == nil {
					t.Errorf("cpu entry incomplete: %+v", c)
				}
			}
			table, errOut, code := runCLI(t, "", args...)
			if code != 0 || !strings.Contains(table, "NUMA NODE") || !strings.Contains(table, "SIBLINGS") {
				t.Errorf("table output exit %d: %s %s", code, table, errOut)
			}
		})
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestTopologyErrors(t *testing.T) {
	t.Parallel()
	broken := t.TempDir()
	if err := os.MkdirAll(filepath.Join(broken, "devices/system/cpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "devices/system/cpu/online"), []byte("0-3,,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"missing root", []string{"topology", "--sysfs-root", "/no/such/dir"}, 2, `--sysfs-root "/no/such/dir": not a readable directory`},
		{"malformed tree", []string{"topology", "--sysfs-root", broken}, 2, `devices/system/cpu/online: bad value "0-3,,"`},
		{"bad output", []string{"topology", "-o", "xml"}, 2, `--output "xml"`},
		{"unknown flag", []string{"topology", "--frobnicate"}, 2, "unknown flag"},
		{"extra argument", []string{"topology", "extra"}, 2, "unknown command"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, code := runCLI(t, "", tt.args...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) || out != "" {
				t.Errorf("pinfold %v = exit %d, stdout %q, stderr %q; want exit %d, stderr containing %q", tt.args, code, out, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
}

// TestEveryCommandHasHelp builds the whole command tree (a duplicated flag
// panics here) and checks each command's --help.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	var walk func(prefix []string, c interface {
		Commands() []*cobra.Command
	})
	n := 0
	walk = func(prefix []string, c interface{ Commands() []*cobra.Command }) {
		for _, sub := range c.Commands() {
			args := append(append([]string{}, prefix...), sub.Name())
			out, errOut, code := runCLI(t, "", append(args, "--help")...)
			if code != 0 || !strings.Contains(out, "Usage:") {
				t.Errorf("pinfold %v --help: exit %d %s", args, code, errOut)
			}
			n++
			walk(args, sub)
		}
	}
	walk(nil, newRootCmd())
	if n < 20 {
		t.Errorf("only %d commands", n)
	}
}

func TestHelpTeaches(t *testing.T) {
	t.Parallel()
	out, _, code := runCLI(t, "", "topology", "--help")
	if code != 0 || !strings.Contains(out, "--sysfs-root") || !strings.Contains(out, "Examples:") {
		t.Errorf("topology --help = exit %d:\n%s", code, out)
	}
}

// TestAgentPrerequisites: an agent that cannot run says exactly what is
// missing and how to fix it, and exits 1: cgroup v1 or hybrid (no
// cgroup.controllers at the cgroup root), a controller missing there.
func TestAgentPrerequisites(t *testing.T) {
	v1 := t.TempDir()
	partial := t.TempDir()
	if err := os.WriteFile(filepath.Join(partial, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		root string
		want []string
	}{
		{v1, []string{"cgroup v2 is not mounted at " + v1, "systemd.unified_cgroup_hierarchy=1"}},
		{partial, []string{`controller "cpuset" is not available`, "cgroup.subtree_control"}},
	} {
		_, errOut, code := runCLI(t, "", "agent", "--cgroup-root", tc.root, "--sysfs-root", "../../numa/testdata/sysfs/laptop-i7-1185g7",
			"--proc-root", "../../numa/testdata/sysfs/laptop-i7-1185g7/proc", "--planner", "127.0.0.1:1", "--state-dir", t.TempDir())
		if code != 1 {
			t.Errorf("agent with cgroup root %s: exit %d, want 1: %s", tc.root, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("agent with cgroup root %s: %q lacks %q", tc.root, errOut, w)
			}
		}
	}
}

// TestAgentIntervalFlags: an agent interval out of range is bad input
// (exit 2) naming the flag and the value, before anything is touched.
func TestAgentIntervalFlags(t *testing.T) {
	for _, tc := range []struct{ flag, value string }{
		{"--split-every", "50ms"},
		{"--split-every", "11s"},
		{"--split-every", "0s"},
		{"--share-every", "10ms"},
		{"--resync", "0s"},
		{"--shrink-notice", "-1s"},
		{"--shrink-notice", "11m0s"},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			_, errOut, code := runCLI(t, "", "agent", tc.flag, tc.value, "--cgroup-root", t.TempDir(), "--planner", "127.0.0.1:1", "--state-dir", t.TempDir())
			if code != 2 || !strings.Contains(errOut, tc.flag+" "+tc.value) {
				t.Errorf("agent %s %s: exit %d, %q: want exit 2 naming the flag and value", tc.flag, tc.value, code, errOut)
			}
		})
	}
}

// TestUpAgentFlags: `pinfold up` refuses a bad agent flag as `pinfold
// agent` does (exit 2 naming the flag and the value) before it starts a
// planner; before, it started the planner and only the background agent
// failed, retried every 10 s (or never ran, without Docker).
func TestUpAgentFlags(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--split-every", "1ms", "--split-every 1ms"},
		{"--share-every", "10ms", "--share-every 10ms"},
		{"--fragment-scheme", "bogus", `--fragment-scheme "bogus"`},
		{"--cgroup-parent", "../x", `--cgroup-parent "../x"`},
		{"--resources-dir", "rel/dir", `--resources-dir "rel/dir"`},
		{"--resources-dir", "/tmp/has:colon", `--resources-dir "/tmp/has:colon"`},
		{"--resources-dir", "/", `--resources-dir "/"`},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			data := t.TempDir()
			// A missing --sysfs-root makes an `up` that got past the flags
			// fail at once, naming the sysfs root instead.
			_, errOut, code := runCLI(t, "", "up", tc.flag, tc.value, "--data-dir", data, "--state-dir", t.TempDir(),
				"--sysfs-root", filepath.Join(t.TempDir(), "none"), "--listen", "127.0.0.1:0")
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("up %s %s: exit %d, %q: want exit 2 naming the flag and value", tc.flag, tc.value, code, errOut)
			}
			if ents, _ := os.ReadDir(data); len(ents) != 0 {
				t.Errorf("up %s %s wrote %d entries to --data-dir: want nothing touched", tc.flag, tc.value, len(ents))
			}
		})
	}
}

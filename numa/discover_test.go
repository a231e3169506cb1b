package numa_test

import (
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/numa"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

var update = flag.Bool("update", false, "rewrite testdata/want/*.json from the current output")

// procFor returns the captured /proc of a machine, or nil when none was captured.
func procFor(name string) fs.FS {
	dir := filepath.Join("testdata/proc", name)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	return os.DirFS(dir)
}

// TestDiscover discovers every fixture tree and compares it with its golden JSON.
func TestDiscover(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("testdata/sysfs/*")
	if err != nil || len(dirs) < 8 {
		t.Fatalf("want at least 8 fixture trees, found %d (%v)", len(dirs), err)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
				t.Errorf("fixture %s has no README saying which machine it reproduces", name)
			}
			got, err := numa.Discover(os.DirFS(dir), procFor(name))
			if err != nil {
				t.Fatalf("Discover(%s): %v", dir, err)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Discover(%s) gave an invalid topology: %v", dir, err)
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata/want", name+".json")
			if *update {
				if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (run go test ./numa -update to create it): %v", err)
			}
			if diff := cmp.Diff(strings.TrimSpace(string(want)), string(b)); diff != "" {
				t.Errorf("Discover(%s) differs from %s (-want +got):\n%s", dir, golden, diff)
			}
			// The JSON must decode back into the same Topology (it is the wire form).
			var back topology.Topology
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, &back, cmpSets); diff != "" {
				t.Errorf("JSON round trip changed the topology (-discovered +decoded):\n%s", diff)
			}
		})
	}
}

// TestDiscoverMatchesShapes checks each generated tree against the Go fixture
// it was described from, so the shapes used by planner tests are what
// discovery really reports for such a machine.
func TestDiscoverMatchesShapes(t *testing.T) {
	t.Parallel()
	for _, s := range topologytest.Machines() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			got, err := numa.Discover(os.DirFS(filepath.Join("testdata/sysfs", s.Name)), procFor(s.Name))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(s.Topology(), got, cmpSets); diff != "" {
				t.Errorf("Discover(%s) != topologytest shape (-shape +discovered):\n%s", s.Name, diff)
			}
		})
	}
}

// cmpSets compares CPU sets by their list form.
var cmpSets = cmp.Transformer("list", func(s interface{ String() string }) string { return s.String() })

// TestDiscoverFixtureFacts pins facts each fixture exists to exercise, so a
// regenerated golden cannot silently lose them.
func TestDiscoverFixtureFacts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		machine string
		check   func(*topology.Topology) string
	}{
		{"smt-off-sparse", func(tp *topology.Topology) string {
			if tp.Online.String() != "0,2,4,6,8,10,12,14" || tp.Isolated.String() != "12,14" {
				return "online " + tp.Online.String() + " isolated " + tp.Isolated.String()
			}
			if c, _ := tp.CPU(8); c.CoreID != 8 || c.Siblings.String() != "8" {
				return "cpu8 core_id/siblings wrong"
			}
			return ""
		}},
		{"memory-only-discontig", func(tp *topology.Topology) string {
			n, ok := tp.NUMANode(5)
			if !ok || !n.CPUs.IsEmpty() || n.MemoryBytes != 128*topologytest.GiB || tp.NUMANodeIDs().String() != "0,2,5" {
				return "memory-only node 5 or node ids wrong: " + tp.NUMANodeIDs().String()
			}
			if d, _ := tp.Distance(2, 5); d != 30 {
				return "distance 2->5 wrong"
			}
			if c, _ := tp.CPU(8); c.NUMANode != 2 {
				return "cpu8 not on node 2"
			}
			return ""
		}},
		{"flat-vm", func(tp *topology.Topology) string {
			if tp.NUMASource != topology.SourceFlat || len(tp.NUMANodes) != 1 || tp.NUMANodes[0].MemoryBytes != 8*topologytest.GiB {
				return "flat fallback wrong"
			}
			return ""
		}},
		{"dual-epyc-7402", func(tp *topology.Topology) string {
			if g := tp.L3Groups(); len(g) != 16 || g[0].String() != "0-2,48-50" {
				return "L3 groups wrong"
			}
			return ""
		}},
		{"dual-xeon-snc2", func(tp *topology.Topology) string {
			if d, _ := tp.Distance(0, 1); d != 11 {
				return "SNC same-socket distance wrong"
			}
			if d, _ := tp.Distance(1, 2); d != 21 {
				return "cross-socket distance wrong"
			}
			return ""
		}},
		{"ci-vm-2cpu", func(tp *topology.Topology) string {
			if tp.Online.String() != "0-1" || tp.NUMASource != topology.SourceSysfs {
				return "captured host wrong"
			}
			return ""
		}},
	}
	for _, tt := range tests {
		got, err := numa.Discover(os.DirFS(filepath.Join("testdata/sysfs", tt.machine)), procFor(tt.machine))
		if err != nil {
			t.Fatalf("%s: %v", tt.machine, err)
		}
		if msg := tt.check(got); msg != "" {
			t.Errorf("%s: %s", tt.machine, msg)
		}
	}
}

// loadTree reads a fixture into a MapFS so a test can break it in memory.
func loadTree(t *testing.T, dir string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDiscoverMalformed breaks one file at a time and expects an error naming it.
func TestDiscoverMalformed(t *testing.T) {
	t.Parallel()
	const (
		cpu  = "devices/system/cpu/"
		node = "devices/system/node/"
	)
	tests := []struct {
		name     string
		machine  string
		set      map[string]string // file -> new content
		remove   []string
		wantFile string // the error must name this file
		wantText string // and contain this
	}{
		{name: "online missing", remove: []string{cpu + "online"}, wantFile: cpu + "online", wantText: "not exist"},
		{name: "online junk", set: map[string]string{cpu + "online": "0-x\n"}, wantFile: cpu + "online", wantText: `"0-x"`},
		{name: "online reversed", set: map[string]string{cpu + "online": "7-0\n"}, wantFile: cpu + "online", wantText: "range end below start"},
		{name: "online empty", set: map[string]string{cpu + "online": "\n"}, wantFile: cpu + "online", wantText: "no online CPUs"},
		{name: "isolated junk", set: map[string]string{cpu + "isolated": "a\n"}, wantFile: cpu + "isolated"},
		{name: "package id missing", remove: []string{cpu + "cpu3/topology/physical_package_id"}, wantFile: cpu + "cpu3/topology/physical_package_id"},
		{name: "package id junk", set: map[string]string{cpu + "cpu3/topology/physical_package_id": "zero\n"}, wantFile: cpu + "cpu3/topology/physical_package_id", wantText: `"zero"`},
		{name: "core id junk", set: map[string]string{cpu + "cpu1/topology/core_id": "-5\n"}, wantFile: cpu + "cpu1/topology/core_id", wantText: `"-5"`},
		{name: "die id junk", set: map[string]string{cpu + "cpu1/topology/die_id": "1.5\n"}, wantFile: cpu + "cpu1/topology/die_id"},
		{name: "siblings missing", remove: []string{cpu + "cpu2/topology/core_cpus_list", cpu + "cpu2/topology/thread_siblings_list"}, wantFile: cpu + "cpu2/topology/thread_siblings_list"},
		{name: "siblings without self", set: map[string]string{cpu + "cpu2/topology/core_cpus_list": "3\n"}, wantFile: cpu + "cpu2/topology/core_cpus_list", wantText: "itself"},
		{name: "siblings disagree", set: map[string]string{cpu + "cpu2/topology/core_cpus_list": "1-2\n"}, wantText: "siblings"},
		{name: "cache level junk", set: map[string]string{cpu + "cpu0/cache/index3/level": "L3\n"}, wantFile: cpu + "cpu0/cache/index3/level"},
		{name: "l3 list junk", set: map[string]string{cpu + "cpu0/cache/index3/shared_cpu_list": "0-3,,\n"}, wantFile: cpu + "cpu0/cache/index3/shared_cpu_list"},
		{name: "cpulist junk", set: map[string]string{node + "node1/cpulist": "forty\n"}, wantFile: node + "node1/cpulist", wantText: `"forty"`},
		{name: "cpulist missing", remove: []string{node + "node0/cpulist"}, wantFile: node + "node0/cpulist"},
		{name: "cpu in two nodes", set: map[string]string{node + "node1/cpulist": "0,20-39,60-79\n"}, wantText: "another NUMA node"},
		{name: "cpu in no node", set: map[string]string{node + "node1/cpulist": "20-39,60-78\n"}, wantText: "online CPU 79 is in no NUMA node"},
		{name: "meminfo without MemTotal", set: map[string]string{node + "node0/meminfo": "Node 0 MemFree: 1 kB\n"}, wantFile: node + "node0/meminfo", wantText: "MemTotal"},
		{name: "meminfo junk", set: map[string]string{node + "node0/meminfo": "Node 0 MemTotal: lots kB\n"}, wantFile: node + "node0/meminfo", wantText: "lots"},
		{name: "meminfo wrong unit", set: map[string]string{node + "node0/meminfo": "Node 0 MemTotal: 5 MB\n"}, wantFile: node + "node0/meminfo"},
		{name: "distance missing", remove: []string{node + "node1/distance"}, wantFile: node + "node1/distance"},
		{name: "distance short row", set: map[string]string{node + "node1/distance": "21\n"}, wantFile: node + "node1/distance", wantText: "1 distances for 2 online NUMA nodes"},
		{name: "distance junk", set: map[string]string{node + "node1/distance": "21 ten\n"}, wantFile: node + "node1/distance", wantText: `"ten"`},
		{name: "distance local not 10", set: map[string]string{node + "node1/distance": "21 11\n"}, wantText: "distance to itself"},
		{name: "node online junk", set: map[string]string{node + "online": "0-\n"}, wantFile: node + "online"},
		{name: "huge file", set: map[string]string{cpu + "online": strings.Repeat("0", 70000)}, wantFile: cpu + "online", wantText: "larger than"},
		{name: "flat without proc", machine: "flat-vm", remove: nil, wantFile: "devices/system/node", wantText: "no procfs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			machine := tt.machine
			if machine == "" {
				machine = "dual-xeon-gold-6230"
			}
			tree := loadTree(t, filepath.Join("testdata/sysfs", machine))
			for f, v := range tt.set {
				tree[f] = &fstest.MapFile{Data: []byte(v)}
			}
			for _, f := range tt.remove {
				delete(tree, f)
			}
			got, err := numa.Discover(tree, nil)
			if err == nil {
				t.Fatalf("Discover with %s broken = %d CPUs, want an error", tt.name, len(got.CPUs))
			}
			if tt.wantFile != "" {
				var fe *numa.FileError
				if !errors.As(err, &fe) || fe.File != tt.wantFile {
					t.Errorf("Discover error = %v, want a FileError for %s", err, tt.wantFile)
				}
			}
			if !strings.Contains(err.Error(), tt.wantText) || !strings.HasPrefix(err.Error(), "numa: ") {
				t.Errorf("Discover error = %q, want it to start with \"numa: \" and contain %q", err, tt.wantText)
			}
		})
	}
}

// TestDiscoverOlderKernel: before Linux 5.7 there is no core_cpus_list, and
// before 5.2 no die_id; discovery falls back to thread_siblings_list and die 0.
func TestDiscoverOlderKernel(t *testing.T) {
	t.Parallel()
	tree := loadTree(t, "testdata/sysfs/laptop-i7-1185g7")
	for f := range tree {
		if strings.HasSuffix(f, "/core_cpus_list") || strings.HasSuffix(f, "/die_id") {
			delete(tree, f)
		}
	}
	got, err := numa.Discover(tree, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(topologytest.Laptop().Topology(), got, cmpSets); diff != "" {
		t.Errorf("older-kernel tree differs (-want +got):\n%s", diff)
	}
}

// FuzzDiscoverFiles feeds arbitrary content into the files discovery parses:
// it must return a topology or an error, never panic.
func FuzzDiscoverFiles(f *testing.F) {
	f.Add("0-3", "0", "0-3", "Node 0 MemTotal: 1024 kB", "10", "0-1")
	f.Add("0-3,,", "x", "", "MemTotal: kB", "10 20", "9")
	f.Fuzz(func(t *testing.T, online, core, cpulist, meminfo, distance, siblings string) {
		tree := fstest.MapFS{
			"devices/system/cpu/online":                            {Data: []byte(online)},
			"devices/system/node/node0/cpulist":                    {Data: []byte(cpulist)},
			"devices/system/node/node0/meminfo":                    {Data: []byte(meminfo)},
			"devices/system/node/node0/distance":                   {Data: []byte(distance)},
			"devices/system/cpu/cpu0/topology/core_id":             {Data: []byte(core)},
			"devices/system/cpu/cpu0/topology/core_cpus_list":      {Data: []byte(siblings)},
			"devices/system/cpu/cpu0/topology/physical_package_id": {Data: []byte("0")},
		}
		top, err := numa.Discover(tree, nil)
		if err == nil {
			if verr := top.Validate(); verr != nil {
				t.Fatalf("Discover returned an invalid topology: %v", verr)
			}
		}
	})
}

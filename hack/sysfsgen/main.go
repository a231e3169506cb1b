// Command sysfsgen writes the machine shapes of planner/topology/topologytest
// out as sysfs trees, the way the kernel lays them out, for numa's tests:
//
//	go run ./hack/sysfsgen -out numa/testdata
//
// writes numa/testdata/sysfs/<machine>/devices/system/{cpu,node}/… and, for
// hosts without NUMA information, numa/testdata/proc/<machine>/meminfo. Offline
// CPUs get a cpuN directory holding only "online" (0), as on a real host,
// where the kernel removes the topology and cache attributes of offline CPUs.
// Each machine's README is kept if it exists.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

func main() {
	out := flag.String("out", "numa/testdata", "testdata directory to write sysfs/ and proc/ under")
	flag.Parse()
	for _, s := range topologytest.Machines() {
		if err := write(*out, s); err != nil {
			fmt.Fprintln(os.Stderr, "sysfsgen:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", filepath.Join(*out, "sysfs", s.Name))
	}
}

type tree struct {
	root string
	err  error
}

func (w *tree) file(rel, content string) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, rel)
	if w.err = os.MkdirAll(filepath.Dir(p), 0o755); w.err == nil {
		w.err = os.WriteFile(p, []byte(content+"\n"), 0o644)
	}
}

func write(out string, s topologytest.Shape) error {
	root := filepath.Join(out, "sysfs", s.Name)
	if err := os.RemoveAll(filepath.Join(root, "devices")); err != nil {
		return err
	}
	t := s.Topology()
	w := &tree{root: root}
	possible := s.PossibleCPUs()
	w.file("devices/system/cpu/possible", possible.String())
	w.file("devices/system/cpu/present", possible.String())
	w.file("devices/system/cpu/online", t.Online.String())
	w.file("devices/system/cpu/offline", possible.Difference(t.Online).String())
	w.file("devices/system/cpu/isolated", t.Isolated.String())
	for id := range possible.All() {
		dir := fmt.Sprintf("devices/system/cpu/cpu%d", id)
		c, ok := t.CPU(id)
		if !ok {
			w.file(dir+"/online", "0")
			continue
		}
		if id != 0 { // cpu0 has no online file on x86: it cannot be unplugged
			w.file(dir+"/online", "1")
		}
		w.file(dir+"/topology/physical_package_id", fmt.Sprint(c.PackageID))
		w.file(dir+"/topology/die_id", fmt.Sprint(c.DieID))
		w.file(dir+"/topology/core_id", fmt.Sprint(c.CoreID))
		w.file(dir+"/topology/core_cpus_list", c.Siblings.String())
		w.file(dir+"/topology/thread_siblings_list", c.Siblings.String())
		w.file(dir+"/topology/package_cpus_list", pkgCPUs(t, c.PackageID).String())
		// Private L1d, L1i and L2 caches, then the shared L3.
		for i, lvl := range []string{"1", "1", "2"} {
			w.file(fmt.Sprintf("%s/cache/index%d/level", dir, i), lvl)
			w.file(fmt.Sprintf("%s/cache/index%d/shared_cpu_list", dir, i), c.Siblings.String())
		}
		if !c.L3.IsEmpty() {
			w.file(dir+"/cache/index3/level", "3")
			w.file(dir+"/cache/index3/shared_cpu_list", c.L3.String())
		}
	}
	if s.Flat {
		w.file(filepath.Join("..", "..", "proc", s.Name, "meminfo"), meminfo("", t.MemoryBytes()))
		return w.err
	}
	ids := t.NUMANodeIDs()
	w.file("devices/system/node/possible", ids.String())
	w.file("devices/system/node/online", ids.String())
	var withCPU, withMem []cpuset.NUMANodeID
	for _, n := range t.NUMANodes {
		if !n.CPUs.IsEmpty() {
			withCPU = append(withCPU, n.ID)
		}
		if n.MemoryBytes > 0 {
			withMem = append(withMem, n.ID)
		}
	}
	w.file("devices/system/node/has_cpu", cpuset.Of(withCPU...).String())
	w.file("devices/system/node/has_memory", cpuset.Of(withMem...).String())
	for _, n := range t.NUMANodes {
		dir := fmt.Sprintf("devices/system/node/node%d", n.ID)
		w.file(dir+"/cpulist", n.CPUs.String())
		w.file(dir+"/meminfo", meminfo(fmt.Sprintf("Node %d ", n.ID), n.MemoryBytes))
		var row []string
		for id := range ids.All() { // one column per online node, ascending
			row = append(row, fmt.Sprint(n.Distances[id]))
		}
		w.file(dir+"/distance", strings.Join(row, " "))
	}
	return w.err
}

func pkgCPUs(t *topology.Topology, pkg int) cpuset.CPUs {
	var ids []cpuset.CPUID
	for _, c := range t.CPUs {
		if c.PackageID == pkg {
			ids = append(ids, c.ID)
		}
	}
	return cpuset.Of(ids...)
}

// meminfo renders the head of a (node) meminfo file; prefix is "Node N " for
// a NUMA node's file and "" for /proc/meminfo.
func meminfo(prefix string, bytes int64) string {
	kb := bytes / 1024
	free := kb * 9 / 10
	return fmt.Sprintf("%sMemTotal:       %d kB\n%sMemFree:        %d kB\n%sMemUsed:        %d kB",
		prefix, kb, prefix, free, prefix, kb-free)
}

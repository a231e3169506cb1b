// Package topologytest holds named host shapes modelled on real machines, as
// Topology values, for tests and benchmarks. hack/sysfsgen writes the same
// shapes out as sysfs trees (numa/testdata/sysfs), and numa's tests check that
// discovering each tree gives back exactly the Topology built here, so the
// hand-described shapes and the discovery code keep each other honest.
//
// Only tests, benchmarks and hack/ import this package.
package topologytest

import (
	"fmt"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
)

// GiB is 2^30 bytes.
const GiB = int64(1) << 30

// Numbering is how Linux numbers SMT threads.
type Numbering int

const (
	// ThreadMajor: first threads of all cores, then second threads
	// (Intel/AMD servers: CPU i and i+cores are siblings).
	ThreadMajor Numbering = iota
	// Adjacent: siblings are consecutive (CPU 2k and 2k+1), as on some
	// BIOSes and on many AMD desktops.
	Adjacent
)

// Shape describes a host the way a data sheet and `lscpu -e` do.
type Shape struct {
	Name           string
	Packages       int
	DiesPerPackage int
	CoresPerDie    int
	ThreadsPerCore int
	Numbering      Numbering
	// NUMANodesPerPackage splits each package's cores evenly into NUMA nodes
	// (sub-NUMA clustering, AMD NPS). 0 means 1.
	NUMANodesPerPackage int
	// NUMAIDs renumbers the CPU-bearing NUMA nodes in order (discontinuous IDs);
	// nil means 0, 1, 2, …
	NUMAIDs []cpuset.NUMANodeID
	// MemoryOnly adds NUMA nodes without CPUs (CXL expanders, PMem as KMEM).
	MemoryOnly []MemoryOnlyNode
	// CoresPerL3 is the number of cores sharing one L3 (AMD CCX); 0 means the
	// whole die; -1 means the host reports no L3 cache.
	CoresPerL3 int
	// CoreIDGap inserts a gap of that size in core_id after every CoreIDGroup
	// cores of a die (Intel core_id 0-3,8-11 style); 0 means contiguous.
	CoreIDGroup, CoreIDGap int
	MemoryPerNode          int64
	// Distances between CPU-bearing NUMA nodes on one package and on different packages.
	SamePackageDistance, RemoteDistance int
	// Offline logical CPUs (SMT switched off, hot-unplugged).
	Offline cpuset.CPUs
	// Isolated is the isolcpus= list.
	Isolated cpuset.CPUs
	// Flat: the host has no devices/system/node (NUMA disabled or a VM
	// without NUMA); MemTotal is then MemoryPerNode.
	Flat bool
}

// MemoryOnlyNode is a NUMA node with memory and no CPUs.
type MemoryOnlyNode struct {
	ID          cpuset.NUMANodeID
	MemoryBytes int64
	Distance    int // to every CPU-bearing node
}

// PossibleCPUs is every logical CPU of the shape, online or not.
func (s Shape) PossibleCPUs() cpuset.CPUs {
	return cpuset.Range[cpuset.CPUID](0, cpuset.CPUID(s.Packages*s.DiesPerPackage*s.CoresPerDie*s.ThreadsPerCore-1))
}

type cpuInfo struct {
	topology.CPU
	core, l3 int // global core index, global L3 group index
}

// Topology builds the Topology the kernel would report for the shape.
func (s Shape) Topology() *topology.Topology {
	nodesPerPkg := max(s.NUMANodesPerPackage, 1)
	coresPerPkg := s.DiesPerPackage * s.CoresPerDie
	totalCores := s.Packages * coresPerPkg
	nodeID := func(idx int) cpuset.NUMANodeID {
		if s.NUMAIDs != nil {
			return s.NUMAIDs[idx]
		}
		return cpuset.NUMANodeID(idx)
	}
	var all []cpuInfo
	for p := range s.Packages {
		for d := range s.DiesPerPackage {
			for k := range s.CoresPerDie {
				inPkg := d*s.CoresPerDie + k
				g := p*coresPerPkg + inPkg
				coreID := k
				if s.CoreIDGroup > 0 {
					coreID = k + (k/s.CoreIDGroup)*s.CoreIDGap
				}
				l3 := -1
				switch {
				case s.CoresPerL3 > 0:
					l3 = p*coresPerPkg/s.CoresPerL3 + inPkg/s.CoresPerL3
				case s.CoresPerL3 == 0:
					l3 = p*s.DiesPerPackage + d
				}
				for t := range s.ThreadsPerCore {
					id := t*totalCores + g
					if s.Numbering == Adjacent {
						id = g*s.ThreadsPerCore + t
					}
					all = append(all, cpuInfo{CPU: topology.CPU{
						ID: cpuset.CPUID(id), CoreID: coreID, PackageID: p, DieID: d,
						NUMANode: nodeID(p*nodesPerPkg + inPkg/(coresPerPkg/nodesPerPkg)),
					}, core: g, l3: l3})
				}
			}
		}
	}
	var online []cpuset.CPUID
	for _, c := range all {
		if !s.Offline.Contains(c.ID) {
			online = append(online, c.ID)
		}
	}
	t := &topology.Topology{Online: cpuset.Of(online...), Isolated: s.Isolated, NUMASource: topology.SourceSysfs}
	group := func(same func(a, b cpuInfo) bool, c cpuInfo) cpuset.CPUs {
		var ids []cpuset.CPUID
		for _, o := range all {
			if same(o, c) && t.Online.Contains(o.ID) {
				ids = append(ids, o.ID)
			}
		}
		return cpuset.Of(ids...)
	}
	cpus := map[cpuset.CPUID]topology.CPU{}
	nodeCPUs := map[cpuset.NUMANodeID][]cpuset.CPUID{}
	for _, c := range all {
		if !t.Online.Contains(c.ID) {
			continue
		}
		c.Siblings = group(func(a, b cpuInfo) bool { return a.core == b.core }, c)
		if c.l3 >= 0 {
			c.L3 = group(func(a, b cpuInfo) bool { return a.l3 == b.l3 }, c)
		}
		cpus[c.ID] = c.CPU
		nodeCPUs[c.NUMANode] = append(nodeCPUs[c.NUMANode], c.ID)
	}
	for id := range t.Online.All() {
		t.CPUs = append(t.CPUs, cpus[id])
	}
	// CPU-bearing nodes first, then memory-only ones; then sort by ID.
	type nodeDef struct {
		id       cpuset.NUMANodeID
		pkg      int // -1 for memory-only
		mem      int64
		distance int
	}
	var defs []nodeDef
	for idx := range s.Packages * nodesPerPkg {
		defs = append(defs, nodeDef{id: nodeID(idx), pkg: idx / nodesPerPkg, mem: s.MemoryPerNode})
	}
	for _, m := range s.MemoryOnly {
		defs = append(defs, nodeDef{id: m.ID, pkg: -1, mem: m.MemoryBytes, distance: m.Distance})
	}
	for _, a := range defs {
		n := topology.NUMANode{ID: a.id, CPUs: cpuset.Of(nodeCPUs[a.id]...), MemoryBytes: a.mem, Distances: map[cpuset.NUMANodeID]int{}}
		for _, b := range defs {
			switch {
			case a.id == b.id:
				n.Distances[b.id] = topology.LocalDistance
			case a.pkg < 0 || b.pkg < 0:
				n.Distances[b.id] = max(a.distance, b.distance)
			case a.pkg == b.pkg:
				n.Distances[b.id] = s.SamePackageDistance
			default:
				n.Distances[b.id] = s.RemoteDistance
			}
		}
		t.NUMANodes = append(t.NUMANodes, n)
	}
	sortNodes(t.NUMANodes)
	if s.Flat {
		t.NUMASource = topology.SourceFlat
	}
	if err := t.Validate(); err != nil {
		panic(fmt.Sprintf("topologytest: shape %s is inconsistent: %v", s.Name, err))
	}
	return t
}

func sortNodes(ns []topology.NUMANode) {
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && ns[j].ID < ns[j-1].ID; j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
}

// Laptop is a single-socket SMT laptop (Intel Core i7-1185G7: 4 cores, 8
// threads, one 12 MB L3, 16 GiB).
func Laptop() Shape {
	return Shape{Name: "laptop-i7-1185g7", Packages: 1, DiesPerPackage: 1, CoresPerDie: 4, ThreadsPerCore: 2,
		MemoryPerNode: 16 * GiB}
}

// DualXeonGold6230 is a 2-socket SMT server (2 × Xeon Gold 6230: 20 cores,
// 40 threads each; one NUMA node per socket; SLIT 10/21; 96 GiB per node).
// Intel's core_id has gaps (0-4,8-12,16-20,24-28).
func DualXeonGold6230() Shape {
	return Shape{Name: "dual-xeon-gold-6230", Packages: 2, DiesPerPackage: 1, CoresPerDie: 20, ThreadsPerCore: 2,
		CoreIDGroup: 5, CoreIDGap: 3, MemoryPerNode: 96 * GiB, RemoteDistance: 21}
}

// DualXeonSNC2 is 2 sockets with sub-NUMA clustering (2 × Xeon Platinum 8352Y,
// 32 cores each, SNC2): 4 NUMA nodes of 16 cores; SLIT 10 local, 11 on the same
// socket, 21 across sockets; 64 GiB per node.
func DualXeonSNC2() Shape {
	return Shape{Name: "dual-xeon-snc2", Packages: 2, DiesPerPackage: 1, CoresPerDie: 32, ThreadsPerCore: 2,
		NUMANodesPerPackage: 2, MemoryPerNode: 64 * GiB, SamePackageDistance: 11, RemoteDistance: 21}
}

// EPYC7402 is an AMD EPYC-like part with several L3 groups per NUMA node
// (2 × EPYC 7402, NPS1: 24 cores each in 8 CCXs of 3 cores sharing an L3;
// SLIT 10/32; 128 GiB per node).
func EPYC7402() Shape {
	return Shape{Name: "dual-epyc-7402", Packages: 2, DiesPerPackage: 1, CoresPerDie: 24, ThreadsPerCore: 2,
		CoresPerL3: 3, MemoryPerNode: 128 * GiB, RemoteDistance: 32}
}

// SMTOffSparse is a host with SMT switched off (smt/control=off) on a BIOS
// that numbers siblings adjacently, so online is the sparse list 0,2,4,…,14;
// the last two online CPUs are isolated (isolcpus=12,14). One Xeon E-2288G-like
// socket of 8 cores, core_id 0-3,8-11, 64 GiB.
func SMTOffSparse() Shape {
	s := Shape{Name: "smt-off-sparse", Packages: 1, DiesPerPackage: 1, CoresPerDie: 8, ThreadsPerCore: 2,
		Numbering: Adjacent, CoreIDGroup: 4, CoreIDGap: 4, MemoryPerNode: 64 * GiB,
		Isolated: cpuset.MustParseCPUs("12,14")}
	var odd []cpuset.CPUID
	for i := 1; i < 16; i += 2 {
		odd = append(odd, cpuset.CPUID(i))
	}
	s.Offline = cpuset.Of(odd...)
	return s
}

// MemoryOnlyDiscontig has discontinuous NUMA node IDs and a memory-only node:
// two sockets whose firmware numbers their nodes 0 and 2 (as IBM POWER LPARs
// and some Arm servers do), plus a CXL memory expander onlined as node 5 with
// no CPUs. 8 cores × 2 threads per socket, 32 GiB per socket, 128 GiB CXL.
func MemoryOnlyDiscontig() Shape {
	return Shape{Name: "memory-only-discontig", Packages: 2, DiesPerPackage: 1, CoresPerDie: 8, ThreadsPerCore: 2,
		NUMAIDs: []cpuset.NUMANodeID{0, 2}, MemoryPerNode: 32 * GiB, RemoteDistance: 20,
		MemoryOnly: []MemoryOnlyNode{{ID: 5, MemoryBytes: 128 * GiB, Distance: 30}}}
}

// FlatVM is a virtual machine without NUMA (no devices/system/node): 4 vCPUs
// as 4 cores of one socket, 8 GiB (QEMU -smp 4 -m 8G on a recent machine type).
func FlatVM() Shape {
	return Shape{Name: "flat-vm", Packages: 1, DiesPerPackage: 1, CoresPerDie: 4, ThreadsPerCore: 1,
		MemoryPerNode: 8 * GiB, Flat: true}
}

// BenchHost is the allocation benchmarks' host: 2 NUMA nodes × 32 SMT cores
// (128 CPUs), 256 GiB per node.
func BenchHost() Shape {
	return Shape{Name: "bench-2x32-smt", Packages: 2, DiesPerPackage: 1, CoresPerDie: 32, ThreadsPerCore: 2,
		MemoryPerNode: 256 * GiB, RemoteDistance: 21}
}

// Machines are the shapes that have a sysfs tree under numa/testdata/sysfs.
func Machines() []Shape {
	return []Shape{Laptop(), DualXeonGold6230(), DualXeonSNC2(), EPYC7402(), SMTOffSparse(), MemoryOnlyDiscontig(), FlatVM()}
}

// Wide is the largest topology Validate accepts (cpuset.MaxID+1 = 8,192
// CPUs): one NUMA node, two SMT threads a core, and one L3 cache shared by
// every CPU, so that each CPU lists all 8,192 as its L3 group (the
// registration that took a minute to validate, issue 26 N2).
func Wide() *topology.Topology {
	const n = cpuset.MaxID + 1
	all := cpuset.Range[cpuset.CPUID](0, n-1)
	t := &topology.Topology{Online: all, NUMASource: topology.SourceSysfs,
		NUMANodes: []topology.NUMANode{{ID: 0, CPUs: all, MemoryBytes: 1 << 40, Distances: map[cpuset.NUMANodeID]int{0: topology.LocalDistance}}}}
	for id := range cpuset.CPUID(n) {
		core := id &^ 1
		t.CPUs = append(t.CPUs, topology.CPU{ID: id, CoreID: int(core / 2), Siblings: cpuset.Of(core, core+1), L3: all})
	}
	return t
}

// Package numa discovers a host's CPU and NUMA topology from sysfs and returns
// it as a *topology.Topology.
//
// Discover reads from an fs.FS rooted at the sysfs mount (production:
// os.DirFS("/sys"); tests: os.DirFS("testdata/sysfs/<machine>")), so captured
// trees from real machines are the test fixtures. fs.FS refuses absolute and
// ".." paths. Only host_linux.go touches package os.
//
// Files read (relative to the sysfs root):
//
//	devices/system/cpu/online, isolated (optional)
//	devices/system/cpu/cpuN/topology/{physical_package_id,die_id,core_id,core_cpus_list|thread_siblings_list}
//	devices/system/cpu/cpuN/cache/indexM/{level,shared_cpu_list} (optional)
//	devices/system/node/online (optional), nodeN/{cpulist,meminfo,distance}
//
// A host without devices/system/node (NUMA disabled, many VMs) becomes one NUMA
// node 0 holding every online CPU, with MemTotal from /proc/meminfo; the
// result says so in Topology.NUMASource. A missing required file or a malformed
// value is an error naming the file and the value; Discover never panics on input.
//
// References: Documentation/ABI/stable/sysfs-devices-system-cpu,
// Documentation/ABI/stable/sysfs-devices-node, Documentation/admin-guide/cputopology.rst.
package numa

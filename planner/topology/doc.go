// Package topology is the host model pinfold plans against: packages (sockets),
// dies, NUMA nodes with their CPUs, memory and distances, physical cores with
// their SMT sibling threads, L3 cache groups, and the online and isolated CPUs.
//
// A Topology is a plain value. Package numa discovers it from sysfs, the planner
// consumes it, and the wire carries it as JSON (the output of
// `pinfold topology -o json` is exactly this encoding).
//
// It is a pure leaf: it imports only planner/cpuset and the standard library,
// and does no I/O. IDs are never used as slice indexes, because real hosts have
// sparse CPU IDs, discontinuous NUMA node IDs and non-contiguous core IDs.
//
// References: Documentation/ABI/stable/sysfs-devices-system-cpu,
// Documentation/admin-guide/cputopology.rst, Documentation/ABI/stable/sysfs-devices-node.
package topology

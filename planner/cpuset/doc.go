// Package cpuset implements immutable sets of small non-negative IDs (logical
// CPUs, NUMA nodes) and their text form, the Linux "List Format" described in
// cpuset(7), section FORMATS (e.g. "0-3,8,10-11").
//
// It is a leaf package: it imports only the standard library and does no I/O.
// It is imported by planner, numa, cgroup, docker and nodeagent.
//
// Parsing is strict and bounded: surrounding white space (the newline sysfs
// files end with) is trimmed and "" is the empty set, but reversed ranges,
// empty elements, signs, junk and IDs above MaxID are errors that quote the
// input. Kernel quirks about writing an empty value belong to package cgroup.
//
// Reference: https://man7.org/linux/man-pages/man7/cpuset.7.html
package cpuset

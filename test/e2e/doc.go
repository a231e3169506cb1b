// Package e2e holds pinfold's end-to-end tier: tests tagged e2e that drive
// the built pinfold binary (PINFOLD_BIN) inside the QEMU guest (hack/vm) on a
// real kernel with 2 NUMA nodes, cgroup v2 and dockerd. hack/test.sh builds
// the binary and runs them; without PINFOLD_BIN they fail, never skip.
package e2e

package cgroup

import (
	"fmt"

	"github.com/containerd/cgroups/v3"
)

// HostMount is where the unified hierarchy is mounted.
const HostMount = "/sys/fs/cgroup"

// OpenHost opens the host's cgroup v2 tree at /sys/fs/cgroup, refusing
// legacy (v1) and hybrid hosts.
func OpenHost(parent string, opts ...Option) (*Manager, error) {
	switch mode := cgroups.Mode(); mode {
	case cgroups.Unified:
		return Open(HostMount, parent, opts...)
	case cgroups.Hybrid:
		return nil, fmt.Errorf("cgroup: %s is a hybrid v1/v2 hierarchy; pinfold needs cgroup v2 (boot with systemd.unified_cgroup_hierarchy=1)", HostMount)
	case cgroups.Legacy:
		return nil, fmt.Errorf("cgroup: %s is cgroup v1; pinfold needs cgroup v2", HostMount)
	default:
		return nil, fmt.Errorf("cgroup: %s is not mounted", HostMount)
	}
}

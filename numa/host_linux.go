package numa

import (
	"os"

	"github.com/pinfold/pinfold/planner/topology"
)

// DiscoverHost reads this host's topology from /sys (and /proc/meminfo for a
// host without NUMA information).
func DiscoverHost() (*topology.Topology, error) {
	return Discover(os.DirFS("/sys"), os.DirFS("/proc"))
}

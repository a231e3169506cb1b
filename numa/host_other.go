//go:build !linux

package numa

import (
	"errors"

	"github.com/pinfold/pinfold/planner/topology"
)

// DiscoverHost is only supported on Linux.
func DiscoverHost() (*topology.Topology, error) {
	return nil, errors.ErrUnsupported
}

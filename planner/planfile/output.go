package planfile

import (
	"encoding/json"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
)

// Output is the result of `pinfold plan -o json`.
type Output struct {
	Capacity      map[string]int    `json:"capacity"`
	TotalCapacity int               `json:"total_capacity"`
	Placements    []OutputPlacement `json:"placements"`
	// DomainSpread and Violations come from the placement rules: the fault
	// and upgrade domain rule used, and the soft rules that gave way.
	DomainSpread string                `json:"domain_spread,omitempty"`
	Violations   []placement.Violation `json:"violations,omitempty"`
	Error        *OutputError          `json:"error"`
}

// OutputError is why nothing was planned: the engine's error and, when
// the placement rules ran, rule by rule the hosts each eliminated.
type OutputError struct {
	*alloc.Error
	Eliminations []placement.Elimination `json:"eliminations,omitempty"`
}

// OutputPlacement is a Placement with the quota as a decimal CPU amount.
type OutputPlacement struct {
	alloc.Placement
	CPUQuota *json.Number `json:"cpu_quota,omitempty"`
}

// NewOutput renders placements for output.
func NewOutput(p alloc.Params, capacity map[string]int, total int, pls []alloc.Placement, err *OutputError) Output {
	o := Output{Capacity: capacity, TotalCapacity: total, Placements: []OutputPlacement{}, Error: err}
	if o.Capacity == nil {
		o.Capacity = map[string]int{}
	}
	for _, pl := range pls {
		op := OutputPlacement{Placement: pl}
		if len(pl.CPUs) == 0 {
			n := json.Number(alloc.FormatPieces(pl.CPUQuota, p.ShareBase))
			op.CPUQuota = &n
		}
		o.Placements = append(o.Placements, op)
	}
	return o
}

package alloc

// PlanValidFull is PlanValid without planOne's shortcut for one instance.
func PlanValidFull(p Params, hosts []*Host, r Request) (*Result, error) {
	return planValid(p, hosts, r, false)
}

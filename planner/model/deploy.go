package model

// The deploy vocabulary: one shape for a service as wanted, used by the
// stored service record (state.Service), the planner's requests
// (service.DeployRequest), the plan file, the services file and the
// compose reader. Each edge converts its own form into these once;
// placement interprets Rules (placement.NewRequest), it does not define
// them.

// Affinity names the services an instance should run beside (or, as
// anti-affinity, away from): Hard names must hold, Soft ones give way
// when nothing else fits.
type Affinity struct {
	Hard []string `json:"hard"`
	Soft []string `json:"soft"`
}

// IsZero reports whether a names no service.
func (a Affinity) IsZero() bool { return len(a.Hard) == 0 && len(a.Soft) == 0 }

// Rules are a service's placement rules: which hosts may take its
// instances and in what order. The record keeps them so that health and
// the heal, drain and move paths apply the same rules later.
type Rules struct {
	Constraint   string   `json:"constraint,omitempty"`
	Affinity     Affinity `json:"affinity"`
	AntiAffinity Affinity `json:"anti_affinity"`
	// Policy ranks the hosts the rules allow: "" (none), nodes_order,
	// load_avg or spread (placement.Policy).
	Policy       string   `json:"placement_policy,omitempty"`
	HostsOrder   []string `json:"hosts_order,omitempty"`
	DomainSpread string   `json:"domain_spread,omitempty"`
}

// IsZero reports whether r sets no rule (a record then stores none).
func (r Rules) IsZero() bool {
	return r.Constraint == "" && r.Affinity.IsZero() && r.AntiAffinity.IsZero() && r.Policy == "" && len(r.HostsOrder) == 0 && r.DomainSpread == ""
}

// Size is what each instance of a service is given: CPU in pieces of the
// cluster's share base (Pieces; bound to CPUs, or a memory-first quota
// when Bind is false), whole physical cores, and memory.
type Size struct {
	Pieces int  `json:"cpu_pieces"`
	Bind   bool `json:"bind"`
	// WholeCores (bound, whole CPUs only) keeps every SMT sibling of the
	// instance's CPUs free of other instances.
	WholeCores bool  `json:"whole_cores,omitempty"`
	Memory     int64 `json:"memory_bytes"`
	// MemorySoft is the soft limit (memory.high), 0..Memory; 0 is none.
	MemorySoft int64 `json:"memory_soft_bytes"`
}

// Deploy is a service as wanted: what its instances run (Spec), their
// size, how they are spread (Strategy: alloc's auto, each, fill, global,
// drained; "" is auto), at most MaxPerHost on a host (0: no cap), and the
// placement rules. It is the stored record's body, flat in the document.
type Deploy struct {
	Spec
	Size
	Strategy   string `json:"strategy"`
	MaxPerHost int    `json:"max_per_host"`
	Rules      Rules  `json:"rules,omitzero"`
}

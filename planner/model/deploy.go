package model

import (
	"fmt"
	"strconv"
	"strings"
)

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

// Scheduling is how the planner schedules a service's instances: the
// spread strategy and the most on one host. Each field is one key, its
// json tag, in every form a deploy is written: the stored record, the
// plan file's request and the services file (max_per_host), and a
// compose file's x-pinfold-KEY (x-pinfold-max-per-host); the services
// file's diff compares the fields one by one. A new scheduling option
// added here reaches all of those with no code of theirs: only the CLI
// flag, the wire and what interprets it are written for it.
type Scheduling struct {
	// Strategy is alloc's auto, each, fill, global or drained ("" is
	// auto).
	Strategy string `json:"strategy" zero:"auto"`
	// MaxPerHost caps the service's instances on one host (0: no cap).
	MaxPerHost int `json:"max_per_host" zero:"no cap"`
	// Priority orders services when room is short, higher first; 0 is
	// the production class.
	Priority Priority `json:"priority,omitempty" zero:"production"`
	// NeverPreempted: no instance of the service is ever stopped to make
	// room for another, whatever that one's priority (issue 40: "never
	// preempt me" for the highest class). Only for a priority of
	// production or higher (Validate).
	NeverPreempted bool `json:"never_preempted,omitempty" zero:"false"`
}

// Priority is a service's priority: an integer from MinPriority to
// MaxPriority, written as a class's name where one has its value.
type Priority int

// The priority classes, highest first, and the range of a priority.
const (
	PrioritySystem     Priority = 1000
	PriorityProduction Priority = 0
	PriorityBatch      Priority = -500
	PriorityBestEffort Priority = -1000

	MinPriority Priority = -100000
	MaxPriority Priority = 100000
)

// priorityClasses are the classes by name, highest first.
var priorityClasses = []struct {
	name string
	p    Priority
}{{"system", PrioritySystem}, {"production", PriorityProduction}, {"batch", PriorityBatch}, {"best-effort", PriorityBestEffort}}

// ParsePriority reads a class's name (system, production, batch,
// best-effort) or an integer from MinPriority to MaxPriority.
func ParsePriority(s string) (Priority, error) {
	t := strings.TrimSpace(s)
	for _, c := range priorityClasses {
		if t == c.name {
			return c.p, nil
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || Priority(n) < MinPriority || Priority(n) > MaxPriority {
		return 0, &FieldError{Key: "priority", Value: strconv.Quote(s),
			Why: fmt.Sprintf("want system, production, batch, best-effort or an integer from %d to %d", MinPriority, MaxPriority)}
	}
	return Priority(n), nil
}

// String is p's class name, or its number.
func (p Priority) String() string {
	for _, c := range priorityClasses {
		if p == c.p {
			return c.name
		}
	}
	return strconv.Itoa(int(p))
}

// UnmarshalJSON reads a class's name or a whole number; null leaves p as
// it is. The range is Validate's to check: a stored record is read
// whatever it holds, never dropped by its reader.
func (p *Priority) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*p = Priority(n)
		return nil
	}
	uq, err := strconv.Unquote(s)
	if err != nil {
		return &FieldError{Key: "priority", Value: s, Why: "want system, production, batch, best-effort or an integer"}
	}
	v, err := ParsePriority(uq)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MaxMaxPerHost is the largest max per host the wire carries.
const MaxMaxPerHost = 1<<31 - 1

// Validate checks s's values, naming the key (a *FieldError); the
// strategy's name is alloc's to check (alloc.ParseStrategy).
func (s Scheduling) Validate() error {
	if s.MaxPerHost < 0 || s.MaxPerHost > MaxMaxPerHost {
		return &FieldError{Key: "max_per_host", Value: fmt.Sprint(s.MaxPerHost), Why: fmt.Sprintf("want 0 (no cap) to %d", MaxMaxPerHost)}
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		return &FieldError{Key: "priority", Value: fmt.Sprint(int(s.Priority)), Why: fmt.Sprintf("want %d to %d", MinPriority, MaxPriority)}
	}
	if s.NeverPreempted && s.Priority < PriorityProduction {
		// A service of a class that gives way when room is short (batch,
		// best-effort) that may never give way contradicts its class.
		return &FieldError{Key: "never_preempted", Value: "true",
			Why: fmt.Sprintf("only for a priority of production (0) or higher, not %s", s.Priority)}
	}
	return nil
}

// FieldError is a value a deploy's field refused: Key is the field's key
// as the stored record and the files spell it (max_per_host), Value the
// value as written. A reader of a file puts its path before Key.
type FieldError struct{ Key, Value, Why string }

func (e *FieldError) Error() string { return e.Key + " = " + e.Value + ": " + e.Why }

// Deploy is a service as wanted: what its instances run (Spec), their
// size, how they are scheduled, and the placement rules. It is the
// stored record's body, flat in the document.
type Deploy struct {
	Spec
	Size
	Scheduling
	Rules Rules `json:"rules,omitzero"`
	// Source is the project of the services file or compose file whose
	// apply created the service ("": deployed by hand): apply --prune
	// removes only its own project's services.
	Source string `json:"source,omitempty"`
}

// MaxSourceLength bounds Deploy.Source.
const MaxSourceLength = 63

// ValidateSource checks a project name as a source: 1..63 lower-case
// letters, digits, '-', '_' or '.', or "" (by hand).
func ValidateSource(s string) error {
	if len(s) > MaxSourceLength {
		return &FieldError{Key: "source", Value: strconv.Quote(s[:20] + "…"), Why: fmt.Sprintf("want at most %d characters", MaxSourceLength)}
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return &FieldError{Key: "source", Value: strconv.Quote(s), Why: "want lower-case letters, digits, '-', '_' or '.' (a compose project name)"}
		}
	}
	return nil
}

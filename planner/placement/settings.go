package placement

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pinfold/pinfold/planner/alloc"
)

// Settings are cluster-wide: per resource ("cpu", "memory") a buffer or an
// overbooking percentage (as fractions: 0.15), and rule priorities.
type Settings struct {
	Buffer      map[string]float64
	Overbooking map[string]float64 // -1 = unlimited
	Priorities  map[Rule]Priority
	// DownGrace is how long a host's agent may be gone before its
	// instances are placed again elsewhere (0: DefaultDownGrace).
	DownGrace time.Duration `json:",omitempty"`
}

// DefaultDownGrace is the down grace when none is set: a host whose agent
// has been gone this long has its instances placed again elsewhere.
const DefaultDownGrace = 5 * time.Minute

// MaxDownGrace bounds the down grace.
const MaxDownGrace = 7 * 24 * time.Hour

// Grace is the down grace in force.
func (s Settings) Grace() time.Duration {
	if s.DownGrace == 0 {
		return DefaultDownGrace
	}
	return s.DownGrace
}

// Resources the buffer and overbooking settings apply to.
var Resources = []string{"cpu", "memory"}

// Validate checks the settings field by field.
func (s Settings) Validate() error {
	for k, v := range s.Buffer {
		if !slices.Contains(Resources, k) {
			return fmt.Errorf("buffer_percent.%s: unknown resource; want cpu or memory", k)
		}
		if !(v >= 0 && v < 1) {
			return fmt.Errorf("buffer_percent.%s = %v: want 0 ≤ buffer < 1 (0.15 = 15%%)", k, v)
		}
		if _, ok := s.Overbooking[k]; ok {
			return fmt.Errorf("buffer_percent.%s and overbooking_percent.%s: a resource has a buffer or overbooking, never both", k, k)
		}
	}
	for k, v := range s.Overbooking {
		if !slices.Contains(Resources, k) {
			return fmt.Errorf("overbooking_percent.%s: unknown resource; want cpu or memory", k)
		}
		if !(v >= 0 && v <= 100) && v != -1 {
			return fmt.Errorf("overbooking_percent.%s = %v: want ≥ 0 (0.2 = 20%%) or -1 (unlimited)", k, v)
		}
	}
	if s.DownGrace != 0 && (s.DownGrace < time.Second || s.DownGrace > MaxDownGrace) {
		return fmt.Errorf("down_grace = %s: want 1s..%s (0: the default, %s)", s.DownGrace, MaxDownGrace, DefaultDownGrace)
	}
	for r, p := range s.Priorities {
		if _, ok := DefaultPriorities[r]; !ok {
			return fmt.Errorf("constraint_priorities.%s: unknown rule; want one of PlacementConstraint, NodeCapacity, Affinity, FaultDomain, UpgradeDomain, PreferredLocation", r)
		}
		if p < Off || p > Optimization {
			return fmt.Errorf("constraint_priorities.%s = %d: want -1 (off), 0 (hard), 1 (soft) or 2 (optimization)", r, p)
		}
	}
	return nil
}

func (s Settings) priority(r Rule) Priority {
	if p, ok := s.Priorities[r]; ok {
		return p
	}
	return DefaultPriorities[r]
}

// adjust returns host h as a request may use it (seed 000): normal
// placement stays within the unbuffered capacity, capacity × (1 − buffer)
// with a buffer, the capacity itself with overbooking; a request that may
// use the buffer (replacing failed instances, upgrades) gets the total,
// the capacity with a buffer, capacity × (1 + overbooking) with
// overbooking (-1: unlimited, taken as ×1000). Memory is scaled directly;
// CPU overbooking scales each CPU's pieces (Eru's oversold CPUs), a CPU
// buffer caps the total pieces in use (cpuCap; -1 = none).
func (s Settings) adjust(h *alloc.Host, useBuffer bool) (out *alloc.Host, cpuCap int64) {
	out = cloneHost(h)
	cpuCap = -1
	scaleMem := func(f float64) {
		out.MemoryBytes = int64(math.Min(math.Floor(float64(out.MemoryBytes)*f), math.MaxInt64/4))
		for i := range out.NUMANodes {
			out.NUMANodes[i].MemoryBytes = int64(math.Min(math.Floor(float64(out.NUMANodes[i].MemoryBytes)*f), math.MaxInt64/4))
		}
	}
	if useBuffer {
		factor := func(o float64) float64 {
			if o == -1 {
				return 1000
			}
			return 1 + o
		}
		if o, ok := s.Overbooking["cpu"]; ok {
			for i := range out.CPUs {
				out.CPUs[i].Capacity = int(math.Floor(float64(out.CPUs[i].Capacity) * factor(o)))
			}
		}
		if o, ok := s.Overbooking["memory"]; ok {
			scaleMem(factor(o))
		}
		return out, -1
	}
	if b, ok := s.Buffer["memory"]; ok {
		scaleMem(1 - b)
	}
	if b, ok := s.Buffer["cpu"]; ok {
		total := int64(0)
		for _, c := range out.CPUs {
			total += int64(c.Capacity)
		}
		cpuCap = int64(math.Floor(float64(total) * (1 - b)))
	}
	return out, cpuCap
}

func cloneHost(h *alloc.Host) *alloc.Host {
	c := *h
	c.Memo = nil // the copy is changed: the original's capacities are not its own
	c.CPUs = slices.Clone(h.CPUs)
	c.NUMANodes = slices.Clone(h.NUMANodes)
	return &c
}

package nodeagent

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/docker"
	"github.com/pinfold/pinfold/planner/model"
)

// Container labels the agent adds beside docker's own.
const (
	LabelGeneration = "io.pinfold.generation"
)

// Kind is what an action does.
type Kind string

const (
	Create        Kind = "create"         // create and start a container
	Update        Kind = "update"         // docker update (resize, or drift back)
	Start         Kind = "start"          // start a stopped container
	Unpause       Kind = "unpause"        // resume a paused container
	Replace       Kind = "replace"        // blue-green: pause old, start new, check health, remove old
	FinishReplace Kind = "finish-replace" // a replace was interrupted after the new container started
	Remove        Kind = "remove"         // remove an orphan (or a failed new container)
	Reassert      Kind = "reassert"       // rewrite the cgroup files Docker cannot express
)

// Action is one step of convergence.
type Action struct {
	Kind      Kind
	Instance  *model.Instance // nil for orphans
	Container string          // the container acted on (old one for Replace)
	New       string          // FinishReplace: the new container
	Want      Want
	Reason    string
	// MemoryCurrent is what the container used when observed (Update):
	// above the new limit, the agent shrinks it guided by pressure first.
	MemoryCurrent int64
	// Seen, on a Reassert that is the pass's only action on its running
	// container, is what the pass observed of it: the re-assert writes the
	// files that differ from it without reading them again.
	Seen *Observed
}

// releases reports whether an update only gives resources back: its
// cpuset and NUMA nodes are within what the container has, and its memory
// and CPU quota are no larger.
func releases(have, want docker.Resources) bool {
	// 0: no limit; quotas compare as rates (their periods may differ).
	quotaLE := have.CPUQuota == 0 || want.CPUQuota != 0 && want.CPUQuota*have.PeriodUsec() <= have.CPUQuota*want.PeriodUsec()
	return want.CPUs.IsSubsetOf(have.CPUs) && want.Mems.IsSubsetOf(have.Mems) && quotaLE &&
		want.MemoryBytes <= have.MemoryBytes && want.MemoryReservation <= have.MemoryReservation
}

// Fence keeps the actions that start nothing: what an agent may do on the
// word of its checkpoint alone, before the planner answered (an instance
// the planner placed elsewhere meanwhile must not come back here). It
// drops Create, Start and Replace (which makes a new container); resuming
// a paused container and settling an interrupted replace stay.
func Fence(actions []Action) []Action {
	return slices.DeleteFunc(slices.Clone(actions), func(a Action) bool {
		switch a.Kind {
		case Create, Start, Replace:
			return true
		}
		return false
	})
}

// Known is what the agent learnt in earlier passes, by instance ID.
type Known struct {
	// Failed is the generation whose replace failed and was rolled back:
	// it is not retried (a new generation is).
	Failed map[string]int64
	// Refused is the generation whose resize the host refused: it is not
	// retried while the planner rolls it back.
	Refused map[string]int64
	// Weights are the share loop's corrected cpu.weight values: they
	// replace the mapped ones, so a pass does not undo the loop's work.
	Weights map[string]uint64
}

// Observed is one pinfold container as seen in Docker and the kernel.
type Observed struct {
	docker.Container
	Generation int64 // from its label
	// What the kernel holds for a running container (0: not read).
	MemoryCurrent int64
	CPUWeight     uint64
	CPUUsageUsec  uint64    // cpu.stat usage_usec
	UsageAt       time.Time // when cpu.stat was read (the usage's time, for rates)
	// Kernel is what the container's cgroup files hold (cpuset.cpus,
	// cpuset.mems, cpu.max, memory.max), nil when not read: a write
	// straight into them, behind Docker's back, shows here only.
	Kernel *docker.Resources
}

// cpuMax is r's CFS limit as cpu.max writes it ("max 100000", "5000 1000000").
func cpuMax(r docker.Resources) string {
	if r.CPUQuota == 0 {
		return fmt.Sprintf("max %d", r.PeriodUsec())
	}
	return fmt.Sprintf("%d %d", r.CPUQuota, r.PeriodUsec())
}

// kernelDrift names how the cgroup files k differ from the plan want
// ("": they do not).
func kernelDrift(k *docker.Resources, want docker.Resources) string {
	if k == nil {
		return ""
	}
	var d []string
	fd := diffFiles(*k, want)
	if fd.cpus {
		d = append(d, fmt.Sprintf("cpuset.cpus %q (plan %q)", k.CPUs, want.CPUs))
	}
	if fd.mems {
		d = append(d, fmt.Sprintf("cpuset.mems %q (plan %q)", k.Mems, want.Mems))
	}
	if fd.cpuMax {
		d = append(d, fmt.Sprintf("cpu.max %q (plan %q)", cpuMax(*k), cpuMax(want)))
	}
	if fd.memoryMax {
		d = append(d, fmt.Sprintf("memory.max %d (plan %d)", k.MemoryBytes, want.MemoryBytes))
	}
	if len(d) == 0 {
		return ""
	}
	return "cgroup files drifted from the plan: " + strings.Join(d, ", ")
}

// fileDiff says which cgroup files hold something else than the plan.
type fileDiff struct{ cpus, mems, cpuMax, memoryMax bool }

// diffFiles compares the files k (read from the kernel) with the plan want.
func diffFiles(k, want docker.Resources) fileDiff {
	return fileDiff{
		cpus:   !k.CPUs.Equal(want.CPUs),
		mems:   !k.Mems.Equal(want.Mems),
		cpuMax: k.CPUQuota != want.CPUQuota || want.CPUQuota != 0 && k.PeriodUsec() != want.PeriodUsec(),
		// The kernel rounds memory.max down to a page (up to 64 KiB on arm64).
		memoryMax: k.MemoryBytes > want.MemoryBytes || want.MemoryBytes-k.MemoryBytes >= 64<<10,
	}
}

// Diff compares what the planner wants with what Docker has and returns the
// actions that converge them. Pure. The order is safe: first what releases
// resources (orphans removed, then updates that only shrink), then the rest
// by instance ID; so a CPU or memory moving between two instances in one
// pass is given up by one before the other takes it.
// known says what the agent learnt in earlier passes.
//
// Per desired instance: no container → Create; two containers (a replace in
// flight) → FinishReplace when the newer one (generation label = desired)
// runs, else Remove the newer one and Unpause the old; one container whose
// image or command differs → Replace; resources differ → Update (a resize,
// or drift such as a hand-made docker update); stopped → Start; paused →
// Unpause; and always Reassert the direct cgroup files (idempotent: equal
// values are not rewritten). Containers of no desired instance → Remove.
func Diff(h Host, desired []model.Instance, observed []Observed, scheme Scheme, known Known) []Action {
	shared := pool(h, desired)
	byInst := map[string][]Observed{}
	for _, o := range observed {
		byInst[o.Instance] = append(byInst[o.Instance], o)
	}
	ds := slices.Clone(desired)
	slices.SortFunc(ds, func(a, b model.Instance) int { return cmp.Compare(a.ID, b.ID) })
	var out []Action
	for i := range ds {
		in := &ds[i]
		first := len(out)
		want := Map(h, *in, scheme, shared)
		if w, ok := known.Weights[in.ID]; ok {
			want.CPUWeight = w
		}
		cs := byInst[in.ID]
		delete(byInst, in.ID)
		slices.SortFunc(cs, func(a, b Observed) int {
			return cmp.Or(cmp.Compare(a.Generation, b.Generation), cmp.Compare(a.ID, b.ID))
		})
		switch {
		case len(cs) == 0 && in.Replaces != "" && known.Failed[in.ID] == in.Generation:
			continue // a move whose health gate failed: given up, reported
		case len(cs) == 0:
			out = append(out, Action{Kind: Create, Instance: in, Want: want, Reason: "no container"})
			continue
		case len(cs) > 1:
			newest := cs[len(cs)-1]
			if newest.Generation == in.Generation && newest.Running && !newest.Paused {
				out = append(out, Action{Kind: FinishReplace, Instance: in, Container: cs[0].ID, New: newest.ID, Want: want, Reason: "replace in flight: new container runs"})
			} else {
				out = append(out, Action{Kind: Remove, Instance: in, Container: newest.ID, Reason: "replace in flight: new container not running"})
				if cs[0].Paused {
					out = append(out, Action{Kind: Unpause, Instance: in, Container: cs[0].ID, Want: want, Reason: "roll back the interrupted replace"})
				}
			}
			for _, extra := range cs[1 : len(cs)-1] {
				out = append(out, Action{Kind: Remove, Instance: in, Container: extra.ID, Reason: "a third container for one instance"})
			}
			continue
		}
		c := cs[0]
		switch {
		case specChanged(c, in) && known.Failed[in.ID] != in.Generation:
			out = append(out, Action{Kind: Replace, Instance: in, Container: c.ID, Want: want, Reason: "image, command or network changed"})
			continue
		case c.Generation < in.SpecGeneration && known.Failed[in.ID] != in.Generation:
			out = append(out, Action{Kind: Replace, Instance: in, Container: c.ID, Want: want, Reason: fmt.Sprintf("replace asked at generation %d; the container is of generation %d", in.SpecGeneration, c.Generation)})
			continue
		case !sameResources(c.Applied, want.Resources) && known.Refused[in.ID] != in.Generation:
			out = append(out, Action{Kind: Update, Instance: in, Container: c.ID, Want: want, Reason: "resources differ", MemoryCurrent: c.MemoryCurrent})
		case c.Paused:
			out = append(out, Action{Kind: Unpause, Instance: in, Container: c.ID, Want: want, Reason: "paused"})
		}
		if !c.Running && !c.Paused {
			out = append(out, Action{Kind: Start, Instance: in, Container: c.ID, Want: want, Reason: "not running (" + c.Status + ")"})
		}
		// The files follow the plan, except while the host refuses the
		// plan's resize: then what Docker holds (the refusal keeps it).
		files := want
		if known.Refused[in.ID] == in.Generation {
			files.Resources = c.Applied
		}
		reason := kernelDrift(c.Kernel, files.Resources)
		if c.Kernel != nil && c.CPUWeight != 0 && files.CPUWeight != 0 && c.CPUWeight != files.CPUWeight {
			w := fmt.Sprintf("cpu.weight %d (plan %d)", c.CPUWeight, files.CPUWeight)
			if reason == "" {
				reason = "cgroup files drifted from the plan: " + w
			} else {
				reason += ", " + w
			}
		}
		act := Action{Kind: Reassert, Instance: in, Container: c.ID, Want: files, Reason: reason}
		if len(out) == first && c.Running && c.Kernel != nil {
			act.Seen = &c
		}
		out = append(out, act)
	}
	var orphans []Observed
	for _, cs := range byInst {
		orphans = append(orphans, cs...)
	}
	slices.SortFunc(orphans, func(a, b Observed) int { return cmp.Compare(a.ID, b.ID) })
	var first []Action
	for _, o := range orphans {
		if o.Host == "" {
			continue // made before host labels: maybe another host's agent's, so never removed
		}
		first = append(first, Action{Kind: Remove, Container: o.ID, Reason: "no desired instance " + o.Instance})
	}
	have := map[string]docker.Resources{}
	for _, o := range observed {
		have[o.ID] = o.Applied
	}
	shrink := func(a Action) bool {
		return a.Kind == Update && releases(have[a.Container], a.Want.Resources)
	}
	for _, a := range out {
		if shrink(a) {
			first = append(first, a)
		}
	}
	for _, a := range out {
		if !shrink(a) {
			first = append(first, a)
		}
	}
	return first
}

// specChanged: the container was made from another image, command or
// network mode than the instance asks for (none of which Docker can change
// in place). An instance without a command or network takes the image's
// and the engine's defaults, whatever they are.
func specChanged(c Observed, in *model.Instance) bool {
	return c.Image != in.Image ||
		in.Command != nil && !slices.Equal(c.Cmd, in.Command) ||
		in.Network != "" && c.Network != in.Network
}

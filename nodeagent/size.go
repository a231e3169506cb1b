package nodeagent

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
)

// What a workload is told about its own size, besides what the kernel
// shows it (cpuset, cpu.max): a file mounted read-only in every container
// and environment variables set at create (docs/AGENT.md, "What the
// workload sees").
const (
	// SizeMount is where the instance's size directory is mounted in its
	// container, read-only.
	SizeMount = "/run/pinfold"
	// SizeFile is the file in it (and in the agent's directory for the
	// instance): Size as JSON, rewritten (write, then rename) on a live
	// resize, and before a shrink with the shrink announced in Next.
	SizeFile = "resources.json"
)

// Size is an instance's size as its workload reads it: what the plan gives
// it now, and a shrink announced but not yet applied.
type Size struct {
	Instance   string `json:"instance"`
	Service    string `json:"service"`
	Generation int64  `json:"generation"`
	// CPUs is the plan in CPUs: whole CPUs plus the fragment of a shared
	// one, or a memory-first instance's quota.
	CPUs float64 `json:"cpus"`
	// WholeCPUs and Fragment split CPUs: CPUs it holds alone, and the part
	// of one more it shares (0 ≤ Fragment < 1).
	WholeCPUs int     `json:"whole_cpus"`
	Fragment  float64 `json:"fragment"`
	// CPUsCeil is ⌈CPUs⌉ (at least 1): how many threads are worth running
	// busy at once (what Go ≥ 1.25 sets GOMAXPROCS to from cpu.max).
	CPUsCeil int `json:"cpus_ceil"`
	// Cpuset is the CPUs a bound instance holds, in the kernel's list
	// format; "" for a memory-first one (it shares the host's pool).
	Cpuset      string `json:"cpuset,omitempty"`
	MemoryBytes int64  `json:"memory_bytes"`
	// Next is a shrink the agent announced and applies once the notice
	// (--shrink-notice) has passed; nil when none is pending.
	Next *Size `json:"next,omitempty"`
	// NextAt is when Next is applied at the earliest (RFC 3339, the
	// host's clock; within one --resync after it).
	NextAt string `json:"next_at,omitempty"`
}

// SizeOf is in's size with shareBase pieces to a CPU. It is pure.
func SizeOf(in model.Instance, shareBase int) Size {
	return sizeOf(in, in.Allocation, in.Generation, shareBase)
}

func sizeOf(in model.Instance, al model.Allocation, gen int64, shareBase int) Size {
	if shareBase < 1 {
		shareBase = 100
	}
	pieces := al.Pieces()
	s := Size{Instance: in.ID, Service: in.Service, Generation: gen, MemoryBytes: al.Memory,
		WholeCPUs: pieces / shareBase}
	s.CPUs = float64(pieces) / float64(shareBase)
	s.Fragment = float64(pieces%shareBase) / float64(shareBase)
	s.CPUsCeil = max(1, int(math.Ceil(s.CPUs)))
	if al.Bind {
		ids := make([]cpuset.CPUID, 0, len(al.CPUs))
		for c, p := range al.CPUs {
			if p > 0 {
				ids = append(ids, c)
			}
		}
		s.Cpuset = cpuset.Of(ids...).String()
	}
	return s
}

// Shrinks reports whether going from size was to size next lowers CPU or
// memory: the resize the agent gives notice of.
func Shrinks(was, next Size) bool {
	return next.CPUs < was.CPUs || next.MemoryBytes < was.MemoryBytes
}

// Notice is the file's content while a shrink from was to next is
// announced: was, with next in Next. It is pure.
func Notice(was, next Size) Size {
	was.Next = &next
	next.Next = nil
	return was
}

// JSON is the file's bytes: indented, one trailing newline.
func (s Size) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ") // plain fields: cannot fail
	return append(b, '\n')
}

// Env is what a container is created with (its environment cannot change
// after: the file is the live figure).
func (s Size) Env() []string {
	return []string{
		"PINFOLD_CPUS=" + strconv.FormatFloat(s.CPUs, 'f', -1, 64),
		"PINFOLD_CPUS_CEIL=" + strconv.Itoa(s.CPUsCeil),
		"PINFOLD_MEMORY_BYTES=" + strconv.FormatInt(s.MemoryBytes, 10),
		"PINFOLD_RESOURCES=" + SizeMount + "/" + SizeFile,
	}
}

// sizeDirName checks that an instance ID can name its directory under the
// agent's --resources-dir: one path element, no dot first, at most 200
// bytes of letters, digits, '-', '_' and '.'.
func sizeDirName(id string) error {
	if id == "" || len(id) > 200 || strings.HasPrefix(id, ".") ||
		strings.ContainsFunc(id, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
		}) {
		return fmt.Errorf("instance ID %q cannot name a directory: want 1–200 letters, digits, '-', '_' or '.', not starting with '.'", id)
	}
	return nil
}

// Package model is pinfold's domain model, shared by the planner, its etcd
// documents, the wire and the node agent: what was asked for an instance
// (Spec), what the planner gave it (Allocation), and what its host observed
// (Status, Applied). It is a leaf: it imports only the CPU-set type, so
// host-side packages use it without importing planner internals.
//
// CPU amounts are integer pieces of a CPU everywhere (ShareBase pieces make
// one CPU: 100 or 1000); nothing crosses a boundary as a decimal.
package model

import "github.com/pinfold/pinfold/planner/cpuset"

// Protocol is the version of the planner–agent protocol. A planner refuses
// the registration of an agent that speaks another one, and gives a host
// whose live agent speaks another no new work (state "protocol"). 2: CPU
// quotas cross the wire as pieces, and the watch carries the host's shared
// CPUs. 3: instances carry their container settings (volumes, restart,
// labels, ...) and ports, which an older agent would drop silently.
const Protocol = 3

// HealthCheck is a probe a new container must pass before it replaces the
// old one: exactly one of Exec, TCP, HTTP.
type HealthCheck struct {
	Exec    []string `json:"exec,omitempty"` // run in the container; exit 0 = healthy
	TCP     int      `json:"tcp,omitempty"`  // port on the container's address
	HTTP    string   `json:"http,omitempty"` // port/path, e.g. "8080/healthz": 2xx/3xx = healthy
	Timeout string   `json:"timeout,omitempty"`
	// Port names one of the instance's ports (Spec.Ports): a TCP check
	// without TCP dials its container port, an HTTP check whose HTTP is a
	// bare path ("/healthz") gets it on that port. "": none.
	Port string `json:"port,omitempty"`
}

// Port is a named port of an instance. In a Spec it is what the instance
// asks for: Host is a static host port, or 0 for a dynamic one the planner
// picks from DynamicPortMin..DynamicPortMax; Container 0 is the host
// port's number. In an Allocation (HostPorts) both are set.
type Port struct {
	Name      string `json:"name"`
	Host      int    `json:"host,omitempty"`
	Container int    `json:"container,omitempty"`
}

// The range dynamic host ports are picked from, lowest free first.
const (
	DynamicPortMin = 20000
	DynamicPortMax = 32000
)

// PortEnv is the environment variable that carries port name's host port
// to the container: PINFOLD_PORT_ and the name upper-cased, each character
// that is not a letter or digit replaced by "_" ("http-alt":
// PINFOLD_PORT_HTTP_ALT).
func PortEnv(name string) string {
	b := []byte("PINFOLD_PORT_")
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z':
			b = append(b, c-'a'+'A')
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	return string(b)
}

// PortOf is the port named name in ports, and whether there is one.
func PortOf(ports []Port, name string) (Port, bool) {
	for _, p := range ports {
		if p.Name == name {
			return p, true
		}
	}
	return Port{}, false
}

// Spec is what an instance runs: none of it can change on a live container,
// so a change is a blue-green replacement.
type Spec struct {
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Env     []string `json:"env,omitempty"`
	// Network is the Docker network mode ("": the engine's default).
	Network string `json:"network,omitempty"`
	// Health is the check a replacement must pass (nil: keeps running, or
	// the image's own HEALTHCHECK).
	Health *HealthCheck `json:"health,omitempty"`
	// Ports are the named ports the instance asks for: each gets a host
	// port on its host (Allocation.HostPorts), published to the container
	// and passed to it as PortEnv(name).
	Ports []Port `json:"ports,omitempty"`
	// Pull is when the host pulls Image before creating a container:
	// "" (PullMissing) when the engine lacks it, PullAlways every time (a
	// re-pushed tag).
	Pull string `json:"pull,omitempty"`
	// Container is the rest of the container's settings (volumes,
	// restart policy, labels, user, …), flat in the document.
	Container
}

// Pull policies.
const (
	PullMissing = ""
	PullAlways  = "always"
)

// Allocation is what the planner gave an instance on its host: every field
// can change live (a resize).
type Allocation struct {
	// Bind: the instance holds CPUs (whole ones and at most one fragment);
	// otherwise it is memory-first and shares the host's pool with a quota.
	Bind bool `json:"bind,omitempty"`
	// WholeCores: the bound instance holds whole physical cores (every SMT
	// sibling of its CPUs); it keeps them through moves and resizes.
	WholeCores bool `json:"whole_cores,omitempty"`
	// CPUs maps each held CPU to the pieces of it the instance holds.
	CPUs map[cpuset.CPUID]int `json:"cpus"`
	// CPUQuota is a memory-first instance's CPU time in pieces (0 when bound).
	CPUQuota int `json:"cpu_quota"`
	// NUMANode holds all CPUs and memory; -1: cross-node or memory-first.
	NUMANode cpuset.NUMANodeID `json:"numa_node"`
	// Memory is the hard limit (memory.max) in bytes.
	Memory int64 `json:"memory_bytes"`
	// MemorySoft is the soft limit (reservation) in bytes; 0 = none.
	MemorySoft int64 `json:"memory_soft_bytes,omitempty"`
	// HostPorts are the host ports the instance holds on its host, one per
	// port of its Spec, in the Spec's order (Host and Container set). A
	// resize keeps them; a move or heal gets them anew on the new host.
	HostPorts []Port `json:"host_ports,omitempty"`
}

// Pieces is the CPU the allocation amounts to, in pieces: the pieces held
// when bound, the quota when memory-first.
func (a Allocation) Pieces() int {
	if !a.Bind {
		return a.CPUQuota
	}
	n := 0
	for _, p := range a.CPUs {
		n += p
	}
	return n
}

// Instance is one desired instance of a service on a host.
type Instance struct {
	ID      string `json:"id"`
	Service string `json:"service"`
	Host    string `json:"host"`
	Spec
	Allocation
	// Generation grows with each change the host must apply.
	Generation int64 `json:"generation"`
	// Previous is the allocation before the last resize, kept so that a
	// resize the host refuses can be rolled back.
	Previous *Previous `json:"previous,omitempty"`
	// RolledBack says why the last resize was undone ("" = it was not).
	RolledBack string `json:"rolled_back,omitempty"`
	// SpecGeneration is the generation of the instance's last replace: a
	// container created at an older generation is replaced even when its
	// image and command are unchanged (a restart, or a re-pushed tag).
	// 0: never replaced.
	SpecGeneration int64 `json:"spec_generation,omitempty"`
	// Replaces is the instance this one takes over from (a move by drain
	// or rebalance): that one is removed once this one runs and passed its
	// health gate. "": none.
	Replaces string `json:"replaces,omitempty"`
}

// Previous is an instance's allocation before a resize.
type Previous struct {
	Generation int64 `json:"generation"` // the resize's generation
	Allocation
}

// MaxStatusErrorLen bounds Status.Error: the planner refuses a longer
// report, and the agent cuts an error to it before sending.
const MaxStatusErrorLen = 4 << 10

// Status is what an instance's host observed.
type Status struct {
	State       string `json:"state"` // pending, running, paused, exited, oom_killed, error
	ContainerID string `json:"container_id,omitempty"`
	PID         int    `json:"pid,omitempty"`
	// Generation is the instance generation the container runs.
	Generation int64  `json:"generation"`
	Error      string `json:"error,omitempty"`
	// Refused is the generation the host refused to apply (0 = none).
	Refused int64 `json:"refused_generation,omitempty"`
	// MemoryCurrent is the container's memory.current in bytes.
	MemoryCurrent int64 `json:"memory_current_bytes,omitempty"`
	// CPUGot is the CPU time the container used over the agent's last
	// window (two passes, about --resync apart), in pieces per second:
	// what the kernel delivered, to compare with Allocation.Pieces().
	CPUGot int `json:"cpu_got_pieces,omitempty"`
	// Applied is what the container has, as the host reports it.
	Applied *Applied `json:"applied,omitempty"`
}

// Applied is a container's resources as its host reports them.
type Applied struct {
	CPUs        string `json:"cpus"`
	Mems        string `json:"mems"`
	CPUQuota    int64  `json:"cpu_quota"` // cpu.max quota as µs per 100 ms (a quota per 1 s period is scaled down); 0 = none
	CPUWeight   uint64 `json:"cpu_weight"`
	MemoryBytes int64  `json:"memory_bytes"`
}

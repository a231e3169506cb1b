package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// instanceJSON is the -o json form of an instance.
type instanceJSON struct {
	ID      string `json:"id"`
	Service string `json:"service"`
	// Priority is the service's (0 production, 1000 system, -500 batch,
	// -1000 best-effort, or another whole number).
	Priority int32 `json:"priority"`
	// NeverPreempted: the service's instances are never stopped to make
	// room for another (deploy --never-preempted).
	NeverPreempted bool             `json:"never_preempted,omitempty"`
	Host           string           `json:"host"`
	CPUs           map[string]int32 `json:"cpus"`
	// CPUQuota, CPUPlanned and CPUGot are JSON numbers written exactly
	// as decimals of pieces (1.7, never 1.7000000000000002).
	CPUQuota json.Number `json:"cpu_quota,omitempty"`
	// CPUPlanned is the CPUs the allocation amounts to; CPUGot what the
	// container used over the agent's last window (both in CPUs), null
	// while it is not running (the table's "-": a pending instance did not
	// get 0, it has not run).
	CPUPlanned  json.Number  `json:"cpu_planned"`
	CPUGot      *json.Number `json:"cpu_got"`
	NUMANode    int32        `json:"numa_node"`
	Memory      int64        `json:"memory_bytes"`
	MemorySoft  int64        `json:"memory_soft_bytes,omitempty"`
	Bind        bool         `json:"bind"`
	WholeCores  bool         `json:"whole_cores,omitempty"`
	Image       string       `json:"image,omitempty"`
	Network     string       `json:"network,omitempty"`
	State       string       `json:"state"`
	Generation  int64        `json:"generation"`
	ContainerID string       `json:"container_id,omitempty"`
	PID         int32        `json:"pid,omitempty"`
	Error       string       `json:"error,omitempty"`
	Observed    int64        `json:"observed_generation"`
	MemoryUsed  int64        `json:"memory_current_bytes,omitempty"`
	RolledBack  string       `json:"rolled_back,omitempty"`
	Applied     *appliedJSON `json:"applied,omitempty"`
	// The container settings, flat (model.Container's JSON names).
	model.Container
	// Ports are the host ports the instance holds (its container gets
	// each as PINFOLD_PORT_<NAME>).
	Ports []portJSON `json:"ports,omitempty"`
	// Preempted (deploy only) are the instances of lower-priority
	// services the deploy stopped on this instance's host to make room,
	// listed on the first instance it placed there.
	Preempted []victimJSON `json:"preempted,omitempty"`
}

// victimJSON is an instance stopped by preemption.
type victimJSON struct {
	ID       string `json:"id"`
	Service  string `json:"service"`
	Host     string `json:"host"`
	Priority int32  `json:"priority"`
}

// portJSON is one host port an instance holds.
type portJSON struct {
	Name      string `json:"name"`
	Host      int32  `json:"host_port"`
	Container int32  `json:"container_port"`
	Static    bool   `json:"static"`
}

// portsJSON are in's held ports, each marked static when asked so.
func portsJSON(in *pinfoldv1.Instance) []portJSON {
	var out []portJSON
	for _, p := range in.HostPorts {
		static := slices.ContainsFunc(in.Ports, func(q *pinfoldv1.Port) bool { return q.Name == p.Name && q.Host != 0 })
		out = append(out, portJSON{Name: p.Name, Host: p.Host, Container: p.Container, Static: static})
	}
	return out
}

// portsText is in's held ports as the deploy flag writes them
// ("http=8080:80 admin=20000"), "" for none.
func portsText(in *pinfoldv1.Instance) string {
	var parts []string
	for _, p := range pinfoldv1.PortsModel(in.HostPorts) {
		if p.Container == p.Host {
			p.Container = 0
		}
		parts = append(parts, p.String())
	}
	return strings.Join(parts, " ")
}

// appliedJSON is what the host reports the container has.
type appliedJSON struct {
	CPUs        string `json:"cpus"`
	Mems        string `json:"mems"`
	CPUQuota    int64  `json:"cpu_quota_us"`
	CPUWeight   uint64 `json:"cpu_weight"`
	MemoryBytes int64  `json:"memory_bytes"`
}

func toInstanceJSON(in *pinfoldv1.Instance) instanceJSON {
	var ap *appliedJSON
	if a := in.Applied; a != nil {
		ap = &appliedJSON{a.Cpus, a.Mems, a.CpuQuota, a.CpuWeight, a.MemoryBytes}
	}
	var got *json.Number
	if in.State == "running" {
		n := json.Number(cpuAmount(int64(in.CpuGotPieces), in.ShareBase))
		got = &n
	}
	return instanceJSON{Container: in.Container.Model(), Applied: ap, ID: in.Id, Service: in.Service, Priority: in.Priority, NeverPreempted: in.NeverPreempted, Host: in.Host, CPUs: cpuMapJSON(in.Cpus), CPUQuota: json.Number(quotaOf(in)),
		CPUPlanned: json.Number(cpuAmount(int64(plannedPieces(in)), in.ShareBase)), CPUGot: got,
		NUMANode: in.NumaNode, Memory: in.MemoryBytes, MemorySoft: in.MemorySoftBytes, Bind: in.Bind, WholeCores: in.WholeCores, Image: in.Image,
		Network: in.Network, State: in.State, Generation: in.Generation, ContainerID: in.ContainerId, PID: in.Pid, Error: in.Error,
		Observed: in.ObservedGeneration, MemoryUsed: in.MemoryCurrentBytes, RolledBack: in.RolledBack, Ports: portsJSON(in)}
}

// plannedPieces is the CPU an instance's allocation amounts to, in pieces.
func plannedPieces(in *pinfoldv1.Instance) int {
	return in.Model().Pieces()
}

// quotaOf is a memory-first instance's CPU quota in CPUs ("" when bound).
func quotaOf(in *pinfoldv1.Instance) string {
	if in.Bind || in.CpuQuotaPieces <= 0 || in.ShareBase <= 0 {
		return ""
	}
	return alloc.FormatPieces(int(in.CpuQuotaPieces), int(in.ShareBase))
}

func instancesJSON(ins []*pinfoldv1.Instance) []instanceJSON {
	out := []instanceJSON{}
	for _, in := range ins {
		out = append(out, toInstanceJSON(in))
	}
	return out
}

// priorityText is in's service's priority, and whether it is never
// preempted.
func priorityText(in *pinfoldv1.Instance) string {
	s := model.Priority(in.Priority).String()
	if in.NeverPreempted {
		s += ", never preempted"
	}
	return s
}

func printInstances(w io.Writer, ins []*pinfoldv1.Instance) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A VOLUMES column only when some instance has one, PORTS only when
	// an instance holds some.
	vols := slices.ContainsFunc(ins, func(in *pinfoldv1.Instance) bool { return len(in.GetContainer().GetVolumes()) > 0 })
	withPorts := slices.ContainsFunc(ins, func(in *pinfoldv1.Instance) bool { return len(in.HostPorts) > 0 })
	// A PRIORITY column only when a service is not production, or is
	// never preempted ("production, never preempted").
	withPriority := slices.ContainsFunc(ins, func(in *pinfoldv1.Instance) bool { return in.Priority != 0 || in.NeverPreempted })
	priority := func(s string) string {
		if !withPriority {
			return ""
		}
		return s + "\t"
	}
	ports := func(s string) string {
		if !withPorts {
			return ""
		}
		return s + "\t"
	}
	head := "ID\tSERVICE\t" + priority("PRIORITY") + "HOST\tNUMA NODE\tCPUS (id:pieces)\tQUOTA\tCPU PLANNED/GOT\tMEMORY\t" + ports("PORTS") + "STATE"
	if vols {
		head += "\tVOLUMES"
	}
	fmt.Fprintln(tw, head)
	for _, in := range ins {
		numa := "cross"
		if in.NumaNode >= 0 {
			numa = fmt.Sprint(in.NumaNode)
		}
		if !in.Bind {
			numa = "-"
		}
		var cpus []string
		for _, id := range slices.Sorted(maps.Keys(in.Cpus)) {
			cpus = append(cpus, fmt.Sprintf("%d:%d", id, in.Cpus[id]))
		}
		state := in.State
		if in.Error != "" {
			state += " (" + in.Error + ")"
		}
		if in.RolledBack != "" {
			state += " [" + in.RolledBack + "]"
		}
		got := "-"
		if in.State == "running" {
			got = cpuAmount(int64(in.CpuGotPieces), in.ShareBase)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\t%s\t%s/%s\t%s\t%s%s", in.Id, in.Service, priority(priorityText(in)), in.Host, numa, orDash(strings.Join(cpus, " ")),
			orDash(quotaOf(in)), cpuAmount(int64(plannedPieces(in)), in.ShareBase), got, formatBytes(in.MemoryBytes), ports(orDash(portsText(in))), state)
		if vols {
			fmt.Fprintf(tw, "\t%s", orDash(strings.Join(in.GetContainer().GetVolumes(), " ")))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func showInstances(cmd *cobra.Command, out outputFlag, ins []*pinfoldv1.Instance) error {
	if out.json() {
		return writeJSON(cmd.OutOrStdout(), instancesJSON(ins))
	}
	return printInstances(cmd.OutOrStdout(), ins)
}

func newPsCmd() *cobra.Command {
	var (
		c             clientFlags
		out           outputFlag
		host, service string
		w             watchFlag
	)
	cmd := &cobra.Command{
		Use:   "ps [--host H] [--service S] [--watch]",
		Short: "List instances with their CPUs, NUMA node, memory and state",
		Long: `List the instances the planner placed: host, CPUs (CPU:pieces) or the
memory-first quota, NUMA node, memory, the state their host reports, and the
CPU each one used over its host's last window next to what it was given
(CPU PLANNED/GOT; GOT is '-', and cpu_got null in -o json, while the
instance is not running).
--watch redraws the list every --interval until Ctrl-C. The planner answers
a page of instances at a time (500 by default); ps walks every page, so it
lists every instance (a CLI older than the planner would show the first page
only).`,
		Example: `  pinfold ps
  pinfold ps --service web --watch
  pinfold ps --host h3 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if err := w.validate(); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				if host != "" { // an unknown host is bad input (exit 2), not an empty list
					if _, err := cl.GetHost(cmd.Context(), connect.NewRequest(&pinfoldv1.GetHostRequest{Name: host})); err != nil {
						return err
					}
				}
				// So is a service never deployed, unless watching for it.
				if service != "" && !w.on {
					if _, err := cl.GetService(cmd.Context(), connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: service})); err != nil {
						return err
					}
				}
				return w.run(cmd, out, func() error {
					ins, err := allInstances(cmd.Context(), cl, host, service)
					if err != nil {
						return err
					}
					if out.json() {
						return writeJSON(cmd.OutOrStdout(), instancesJSON(ins))
					}
					return printInstances(cmd.OutOrStdout(), ins)
				})
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	w.register(cmd)
	cmd.Flags().StringVar(&host, "host", "", "only this host")
	cmd.Flags().StringVar(&service, "service", "", "only this service")
	return cmd
}

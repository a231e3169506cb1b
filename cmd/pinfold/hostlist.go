package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

func newHostListCmd() *cobra.Command {
	var (
		c   clientFlags
		out outputFlag
		w   watchFlag
	)
	cmd := &cobra.Command{
		Use:     "list [--watch]",
		Aliases: []string{"ls"},
		Short:   "List hosts with their state, capacity and use",
		Long: `List the registered hosts: state (up, down, disabled, maintenance; with
", draining" or ", drain stuck" while a drain runs: host show says why; with
", overbooked" while it holds more than its nominal capacity, which only the
cluster's overbooking allows: host show and health say what), CPU and
memory used of capacity, the memory-first quota against the shared pool,
NUMA nodes, instances, fault and upgrade domains, and the agent's version.
--watch redraws the list every --interval until Ctrl-C. The planner answers
a page of hosts at a time (500 by default); the list walks every page, so it
holds every host (a CLI older than the planner would show the first page only).`,
		Example: `  pinfold host list
  pinfold host list --watch --interval 5s
  pinfold host list -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if err := w.validate(); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				return w.run(cmd, out, func() error { return listHosts(cmd, cl, out) })
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	w.register(cmd)
	return cmd
}

// listHosts prints the host list once.
func listHosts(cmd *cobra.Command, cl pinfoldv1connect.PlannerServiceClient, out outputFlag) error {
	hosts, err := allHosts(cmd.Context(), cl)
	if err != nil {
		return err
	}
	if out.json() {
		list := []hostJSON{}
		for _, h := range hosts {
			list = append(list, toHostJSON(h))
		}
		return writeJSON(cmd.OutOrStdout(), list)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tCPU USED/CAPACITY\tMEMORY USED/CAPACITY\tMEMORY-FIRST QUOTA/POOL\tNUMA NODES\tINSTANCES\tFAULT DOMAIN\tUPGRADE DOMAIN\tAGENT")
	for _, h := range hosts {
		n := int32(0)
		for _, v := range h.Instances {
			n += v
		}
		agent := "none (pending)"
		if h.Agent {
			agent = orDash(h.AgentVersion)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s/%s\t%s\t%d\t%d\t%s\t%s\t%s\n", h.Name, listState(h),
			cpuAmount(sumPieces(h.UsedCpus), h.ShareBase), cpuAmount(sumPieces(h.CapacityCpus), h.ShareBase),
			formatBytes(h.UsedMemoryBytes), formatBytes(h.CapacityMemoryBytes), quotaPool(h), len(h.NumaNodes), n,
			orDash(h.FaultDomain), orDash(h.UpgradeDomain), agent)
	}
	return tw.Flush()
}

// listState is host list's STATE: the host's state, "draining" or
// "drain stuck" while a drain runs (the drain's deadline and reason are in
// host show), and "overbooked" while it holds more than its nominal
// capacity (what of it: host show, health).
func listState(h *pinfoldv1.Host) string {
	st := h.State
	switch {
	case !h.Draining:
	case strings.HasPrefix(h.Stuck, "drain"):
		st += ", drain stuck"
	default:
		st += ", draining"
	}
	if len(h.OverNominal) > 0 {
		st += ", overbooked"
	}
	return st
}

func newHostShowCmd() *cobra.Command {
	var (
		c   clientFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a host's CPU map: which instance holds how many pieces of which CPU",
		Long: `Show one host: its state, capacity and use, the agent's measurements, and the
CPU map: per NUMA node, each CPU with the pieces each instance holds of it,
what is free, and the memory-first instances sharing the free CPUs.`,
		Example: `  pinfold host show h1
  pinfold host show h1 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.GetHost(cmd.Context(), connect.NewRequest(&pinfoldv1.GetHostRequest{Name: args[0]}))
				if err != nil {
					return err
				}
				if out.json() {
					type showJSON struct {
						hostJSON
						// The shared pool's CPUs bound placement leaves to
						// the largest memory-first quota (a CPU list).
						KeptForMemoryFirst string         `json:"kept_for_memory_first_cpus,omitempty"`
						InstanceList       []instanceJSON `json:"instance_list"`
					}
					s := showJSON{hostJSON: toHostJSON(resp.Msg.Host), InstanceList: []instanceJSON{}}
					if k := keptForMemoryFirst(resp.Msg.Host, resp.Msg.Instances); k.Count > 0 {
						s.KeptForMemoryFirst = k.CPUs.String()
					}
					for _, in := range resp.Msg.Instances {
						s.InstanceList = append(s.InstanceList, toInstanceJSON(in))
					}
					return writeJSON(cmd.OutOrStdout(), s)
				}
				return printHostMap(cmd.OutOrStdout(), resp.Msg.Host, resp.Msg.Instances)
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, true, false, false)
	c.register(cmd)
	out.register(cmd)
	return cmd
}

func printHostMap(w io.Writer, h *pinfoldv1.Host, ins []*pinfoldv1.Instance) error {
	fmt.Fprintf(w, "Host %s: %s, %s of %s CPUs used, %s of %s memory used, %s\n", h.Name, h.State,
		cpuAmount(sumPieces(h.UsedCpus), h.ShareBase), cpuAmount(sumPieces(h.CapacityCpus), h.ShareBase),
		formatBytes(h.UsedMemoryBytes), formatBytes(h.CapacityMemoryBytes), agentState(h))
	if h.FaultDomain != "" || h.UpgradeDomain != "" || h.HostType != "" || len(h.Properties) > 0 {
		var props []string
		for _, k := range slices.Sorted(maps.Keys(h.Properties)) {
			props = append(props, k+"="+h.Properties[k])
		}
		fmt.Fprintf(w, "Placement: type %s, fault domain %s, upgrade domain %s, properties %s\n", orDash(h.HostType), orDash(h.FaultDomain),
			orDash(h.UpgradeDomain), orDash(strings.Join(props, " ")))
	}
	if h.MemoryFirstQuotaPieces > 0 {
		over := ""
		if h.MemoryFirstQuotaPieces > h.SharedPoolPieces {
			over = "; oversold, as memory-first capacity is counted by memory"
		}
		fmt.Fprintf(w, "Memory-first: quotas %s committed against the shared pool (the CPUs no instance holds pieces of), whose CPU time they share%s\n", quotaPool(h), over)
	}
	kept := keptForMemoryFirst(h, ins)
	if kept.Count > 0 {
		fmt.Fprintf(w, "Kept for memory-first: CPUs %s, %s\n", kept.CPUs, kept.explain())
	}
	if len(h.OverNominal) > 0 {
		fmt.Fprintf(w, "Overbooked: above its nominal capacity, using the cluster's overbooking: %s\n", strings.Join(h.OverNominal, ", "))
	}
	if h.Draining {
		fmt.Fprintf(w, "Draining: its instances are moving to other hosts (deadline %s)\n", orDash(h.DrainDeadline))
	}
	if h.Stuck != "" {
		fmt.Fprintf(w, "Stuck: %s\n", h.Stuck)
	}
	if h.MaintenanceUntil != "" {
		fmt.Fprintf(w, "In maintenance: keeps its instances, takes nothing new; grace until %s\n", h.MaintenanceUntil)
	}
	if m := h.Metrics; m != nil {
		fmt.Fprintf(w, "Measured by the agent: load average %.2f %.2f %.2f, memory %s available of %s\n", m.Load1, m.Load5, m.Load15,
			formatBytes(int64(m.MemAvailableBytes)), formatBytes(int64(m.MemTotalBytes)))
	}
	holders := map[int32][]string{}
	for _, in := range ins {
		for _, id := range slices.Sorted(maps.Keys(in.Cpus)) {
			holders[id] = append(holders[id], fmt.Sprintf("%s %d", in.Id, in.Cpus[id]))
		}
	}
	fmt.Fprintf(w, "\nCPU map (%d pieces per CPU):\n", h.ShareBase)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NUMA NODE\tCPU\tCAPACITY\tHOLDERS (instance pieces)\tFREE")
	seen := map[int32]bool{}
	row := func(node string, id int32) {
		c, ok := h.CapacityCpus[id]
		if !ok {
			fmt.Fprintf(tw, "%s\t%d\treserved\t-\t-\n", node, id)
			return
		}
		seen[id] = true
		free := fmt.Sprint(c - h.UsedCpus[id])
		if over := h.UsedCpus[id] - c; over > 0 {
			// Placed with the cluster's CPU overbooking (replacements when
			// no host had nominal room, --use-buffer): its holders share it
			// beyond its capacity.
			free = fmt.Sprintf("0 (overbooked by %d: holders share it)", over)
		} else if kept.CPUs.Contains(cpuset.CPUID(id)) {
			free += " (kept for memory-first)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", node, id, c, orDash(strings.Join(holders[id], ", ")), free)
	}
	for _, n := range h.NumaNodes {
		cpus, _ := cpuset.ParseCPUs(n.Cpus)
		for id := range cpus.All() {
			row(fmt.Sprintf("%d (%s/%s)", n.Id, formatBytes(n.UsedMemoryBytes), formatBytes(n.MemoryBytes)), int32(id))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(h.CapacityCpus)) {
		if !seen[id] {
			row("-", id)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Memory-first instances hold no CPU: they share the shared pool.
	var mf []string
	for _, in := range ins {
		if !in.Bind {
			mf = append(mf, fmt.Sprintf("%s %s", in.Id, cpuAmount(int64(in.CpuQuotaPieces), h.ShareBase)))
		}
	}
	if len(mf) > 0 {
		fmt.Fprintf(w, "Memory-first (CPU quotas on the shared pool of %s CPUs): %s\n", cpuAmount(int64(h.SharedPoolPieces), h.ShareBase), strings.Join(mf, ", "))
	}
	if len(ins) > 0 {
		fmt.Fprintln(w)
		return printInstances(w, ins)
	}
	return nil
}

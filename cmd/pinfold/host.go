package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

func newHostCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Register, list, inspect, change, disable and remove hosts",
		Long: `Hosts are the machines the planner places instances on. A host's agent
registers it with its discovered topology; 'host add' registers one by hand
from a 'pinfold topology -o json' file (deploys onto it stay pending until an
agent runs there).`,
		Example: `  pinfold host list
  pinfold host add h1 --topology h1.json
  pinfold host drain h1 && pinfold host remove h1`,
	}
	cmd.AddCommand(newHostAddCmd(), newHostListCmd(), newHostShowCmd(), newHostSetCmd(), newHostDrainCmd(),
		newHostEnableCmd(true), newHostEnableCmd(false), newHostMaintenanceCmd(), newHostRemoveCmd())
	return cmd
}

// hostJSON is the -o json form of a host.
type hostJSON struct {
	Name      string           `json:"name"`
	State     string           `json:"state"`
	Capacity  resourcesJSON    `json:"capacity"`
	Used      resourcesJSON    `json:"used"`
	NUMANodes []numaJSON       `json:"numa_nodes"`
	Instances map[string]int32 `json:"instances"`
	Agent     bool             `json:"agent"`
	Version   string           `json:"agent_version,omitempty"`
	Metrics   *metricsJSON     `json:"metrics,omitempty"`
	// The memory-first shared pool and the quotas committed against it,
	// in pieces (see quotaPool).
	SharedPool       int32 `json:"shared_pool_pieces"`
	MemoryFirstQuota int32 `json:"memory_first_quota_pieces"`
	// Placement.
	HostType         string             `json:"host_type,omitempty"`
	Properties       map[string]string  `json:"properties,omitempty"`
	FaultDomain      string             `json:"fault_domain,omitempty"`
	UpgradeDomain    string             `json:"upgrade_domain,omitempty"`
	MaintenanceUntil string             `json:"maintenance_until,omitempty"`
	Draining         bool               `json:"draining,omitempty"`
	DrainDeadline    string             `json:"drain_deadline,omitempty"`
	Stuck            string             `json:"stuck,omitempty"`
	NoAgent          string             `json:"no_agent,omitempty"` // why no agent enforces it, when known
	Topology         *topology.Topology `json:"topology,omitempty"`
}

// metricsJSON is what the host's agent measured (gopsutil).
type metricsJSON struct {
	Load1        float64 `json:"load1"`
	Load5        float64 `json:"load5"`
	Load15       float64 `json:"load15"`
	MemTotal     uint64  `json:"mem_total_bytes"`
	MemAvailable uint64  `json:"mem_available_bytes"`
}

type resourcesJSON struct {
	CPUs        map[string]int32 `json:"cpus"`
	MemoryBytes int64            `json:"memory_bytes"`
}

type numaJSON struct {
	ID          int32  `json:"id"`
	CPUs        string `json:"cpus"`
	MemoryBytes int64  `json:"memory_bytes"`
	UsedBytes   int64  `json:"used_memory_bytes"`
}

func cpuMapJSON(m map[int32]int32) map[string]int32 {
	out := make(map[string]int32, len(m))
	for k, v := range m {
		out[strconv.Itoa(int(k))] = v
	}
	return out
}

func toHostJSON(h *pinfoldv1.Host) hostJSON {
	out := hostJSON{Name: h.Name, State: h.State, Agent: h.Agent, Version: h.AgentVersion, Instances: h.Instances,
		HostType: h.HostType, Properties: h.Properties, FaultDomain: h.FaultDomain, UpgradeDomain: h.UpgradeDomain, MaintenanceUntil: h.MaintenanceUntil,
		Capacity: resourcesJSON{cpuMapJSON(h.CapacityCpus), h.CapacityMemoryBytes},
		Used:     resourcesJSON{cpuMapJSON(h.UsedCpus), h.UsedMemoryBytes}, NUMANodes: []numaJSON{},
		SharedPool: h.SharedPoolPieces, MemoryFirstQuota: h.MemoryFirstQuotaPieces, Draining: h.Draining, DrainDeadline: h.DrainDeadline, Stuck: h.Stuck, NoAgent: h.NoAgent}
	if out.Instances == nil {
		out.Instances = map[string]int32{}
	}
	for _, n := range h.NumaNodes {
		out.NUMANodes = append(out.NUMANodes, numaJSON{n.Id, n.Cpus, n.MemoryBytes, n.UsedMemoryBytes})
	}
	if m := h.Metrics; m != nil {
		out.Metrics = &metricsJSON{m.Load1, m.Load5, m.Load15, m.MemTotalBytes, m.MemAvailableBytes}
	}
	if len(h.TopologyJson) > 0 {
		var t topology.Topology
		if json.Unmarshal(h.TopologyJson, &t) == nil {
			out.Topology = &t
		}
	}
	return out
}

// quotaPool renders the memory-first quotas committed against the shared
// pool (the CPUs no instance holds pieces of): "2.5/6 CPUs", with the ratio
// when the quotas oversell the pool ("9/5 CPUs 1.8x"); "-" with no quota.
func quotaPool(h *pinfoldv1.Host) string {
	q, p := int64(h.MemoryFirstQuotaPieces), int64(h.SharedPoolPieces)
	if q == 0 {
		return "-"
	}
	s := cpuAmount(q, h.ShareBase) + "/" + cpuAmount(p, h.ShareBase) + " CPUs"
	if q > p {
		if p == 0 {
			return s + " (no pool left)"
		}
		s += " " + strconv.FormatFloat(float64(q)/float64(p), 'f', 2, 64) + "x"
	}
	return s
}

// memoryFirstKeep is what bound placement leaves free on a host for its
// memory-first instances (alloc.Host.KeptPool): the CPUs of the shared
// pool kept for the largest memory-first quota. Capacity and deploy do not
// count them, so a host shows more free CPUs than a bound deploy can use.
type memoryFirstKeep struct {
	CPUs      cpuset.CPUs // the kept CPUs; exact where the topology is known (isolated CPUs are no pool)
	Count     int
	Largest   int // the largest memory-first quota, in pieces
	shareBase int32
}

// keptForMemoryFirstAll is memoryFirstKeep for the hosts named in hosts
// that keep any CPU: from the host list and the instances (no topologies,
// so the count is bounded by the planner's pool size).
func keptForMemoryFirstAll(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, hosts map[string]int32) (map[string]memoryFirstKeep, error) {
	hl, err := allHosts(ctx, cl)
	if err != nil {
		return nil, err
	}
	var withQuotas []*pinfoldv1.Host
	for _, h := range hl {
		if _, ok := hosts[h.Name]; ok && h.MemoryFirstQuotaPieces > 0 {
			withQuotas = append(withQuotas, h)
		}
	}
	out := map[string]memoryFirstKeep{}
	if len(withQuotas) == 0 {
		return out, nil
	}
	quota := map[string]bool{}
	for _, h := range withQuotas {
		quota[h.Name] = true
	}
	var il []*pinfoldv1.Instance // those of the hosts with quotas
	err = eachInstancePage(ctx, cl, "", "", func(page []*pinfoldv1.Instance) {
		for _, in := range page {
			if quota[in.Host] {
				il = append(il, in)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	for _, h := range withQuotas {
		if k := keptForMemoryFirst(h, il); k.Count > 0 {
			out[h.Name] = k
		}
	}
	return out, nil
}

// keptForMemoryFirst computes memoryFirstKeep from a host and its
// instances (others' instances are ignored) with the engine's own rule.
func keptForMemoryFirst(h *pinfoldv1.Host, ins []*pinfoldv1.Instance) memoryFirstKeep {
	sb := int(h.ShareBase)
	ah := alloc.Host{Name: h.Name, MemoryFirst: map[int]int{}}
	for _, id := range slices.Sorted(maps.Keys(h.CapacityCpus)) {
		ah.CPUs = append(ah.CPUs, alloc.CPU{ID: cpuset.CPUID(id), Capacity: int(h.CapacityCpus[id]), Used: int(h.UsedCpus[id])})
	}
	for _, in := range ins {
		if !in.Bind && in.Host == h.Name {
			ah.MemoryFirst[int(in.CpuQuotaPieces)]++
		}
	}
	if len(h.TopologyJson) > 0 {
		var t topology.Topology
		if json.Unmarshal(h.TopologyJson, &t) == nil {
			ah.Topology = &t
		}
	}
	k := memoryFirstKeep{Largest: ah.PoolFloor(), CPUs: ah.KeptPool(sb), shareBase: h.ShareBase}
	k.Count = k.CPUs.Len()
	if sb > 0 && ah.Topology == nil {
		// Without the topology the pool may count isolated CPUs: the
		// planner's pool size bounds what can be kept.
		k.Count = min(k.Count, int(h.SharedPoolPieces)/sb)
	}
	return k
}

// explain says what the reserve is, where free CPUs are shown.
func (k memoryFirstKeep) explain() string {
	cpus := "CPUs"
	if k.Count == 1 {
		cpus = "CPU"
	}
	return fmt.Sprintf("%d free %s kept for the largest memory-first quota (%s CPUs): bound instances are not placed there, and capacity does not count them",
		k.Count, cpus, cpuAmount(int64(k.Largest), k.shareBase))
}

func sumPieces(m map[int32]int32) int64 {
	var s int64
	for _, v := range m {
		s += int64(v)
	}
	return s
}

func cpuAmount(pieces int64, sb int32) string {
	if sb <= 0 {
		sb = 100
	}
	return strconv.FormatFloat(float64(pieces)/float64(sb), 'f', -1, 64)
}

// maxTopologyBytes bounds a topology file (a 1,024-CPU machine's is well
// under 1 MiB).
const maxTopologyBytes = 16 << 20

// readCapped reads at most max bytes of file, refusing a larger one (or an
// endless one, such as /dev/zero) instead of reading it all.
func readCapped(file string, max int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %s", alloc.FormatBytes(max))
	}
	return b, nil
}

func newHostAddCmd() *cobra.Command {
	var (
		c        clientFlags
		out      outputFlag
		file     string
		pieces   int32
		reserved string
		resMem   string
		share    float64
		force    bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --topology FILE",
		Short: "Register a host by hand from a topology file",
		Example: `  pinfold topology -o json > h1.json
  pinfold host add h1 --topology h1.json --reserved-cpus 0 --reserved-memory 2GiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if file == "" {
				return badInput("--topology is required (the output of `pinfold topology -o json`)")
			}
			b, err := readCapped(file, maxTopologyBytes)
			if err != nil {
				return badInput("--topology %q: %v", file, err)
			}
			var t topology.Topology
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&t); err != nil {
				return badInput("--topology %q: %v", file, err)
			}
			if err := t.Validate(); err != nil {
				return badInput("--topology %q: %v", file, err)
			}
			if _, err := cpuset.ParseCPUs(reserved); err != nil {
				return badInput("--reserved-cpus %q: %v", reserved, err)
			}
			mem := int64(0)
			if resMem != "" {
				if mem, err = parseSize("--reserved-memory", resMem, false); err != nil {
					return err
				}
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.RegisterHost(cmd.Context(), connect.NewRequest(&pinfoldv1.RegisterHostRequest{Name: args[0], TopologyJson: b,
					PiecesPerCpu: pieces, ReservedCpus: reserved, ReservedMemoryBytes: mem, MemoryShare: share, Force: force}))
				if err != nil {
					return err
				}
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), toHostJSON(resp.Msg.Host))
				}
				h := resp.Msg.Host
				fmt.Fprintf(cmd.OutOrStdout(), "host %s registered: %d CPUs (%s CPUs of capacity), %s memory, %s, state %s\n",
					h.Name, len(h.CapacityCpus), cpuAmount(sumPieces(h.CapacityCpus), h.ShareBase), formatBytes(h.CapacityMemoryBytes), counted(len(h.NumaNodes), "NUMA node"), h.State)
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&file, "topology", "", "topology JSON file: the output of 'pinfold topology -o json' on the host")
	cmd.Flags().Int32Var(&pieces, "pieces-per-cpu", 0, "capacity of each CPU in pieces (default: the share base; more oversells on purpose)")
	cmd.Flags().StringVar(&reserved, "reserved-cpus", "", "CPUs kept for the system, e.g. 0,64")
	cmd.Flags().StringVar(&resMem, "reserved-memory", "", "memory kept for the system, e.g. 2GiB")
	cmd.Flags().Float64Var(&share, "memory-share", 0, "share of MemTotal offered to instances (default 0.9)")
	cmd.Flags().BoolVar(&force, "force", false, "replace a registration that has a different topology")
	return cmd
}

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
", draining" or ", drain stuck" while a drain runs: host show says why), CPU and
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
				return w.run(cmd, func() error { return listHosts(cmd, cl, out) })
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

// listState is host list's STATE: the host's state, and "draining" or
// "drain stuck" while a drain runs (the drain's deadline and reason are in
// host show).
func listState(h *pinfoldv1.Host) string {
	switch {
	case !h.Draining:
		return h.State
	case strings.HasPrefix(h.Stuck, "drain"):
		return h.State + ", drain stuck"
	default:
		return h.State + ", draining"
	}
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
			// Placed with the cluster's CPU overbooking (replacements,
			// --use-buffer): its holders share it beyond its capacity.
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

func newHostSetCmd() *cobra.Command {
	var (
		c        clientFlags
		out      outputFlag
		addCPUs  string
		pieces   int32
		rmCPUs   string
		memory   string
		numaMems []string
		props    []string
		rmProps  []string
		fd, ud   string
		hostType string
	)
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Change a host's capacity and placement properties (running instances are not touched)",
		Long: `Change capacity by absolute values or deltas. Removing CPUs that instances use
is refused with the list of instances; memory cannot go below what is in use.

Placement: --property K=V sets a typed property that deploy constraints
read (true/false are booleans, integers are integers, anything else a
string); --fault-domain fd:/dc1/rack2 (hierarchical) and --upgrade-domain
UD1 place the host for the domain spread rules; --host-type sets the
built-in HostType. 'pinfold health' then reports instances left in
violation.`,
		Example: `  pinfold host set h1 --property HasSSD=true --property NodeColor=green --property SomeProperty=5
  pinfold host set h1 --fault-domain fd:/dc1/rack2 --upgrade-domain UD1 --host-type NodeType01
  pinfold host set h1 --remove-property NodeColor
  pinfold host set h1 --remove-cpus 7
  pinfold host set h1 --add-cpus 7 --pieces 100
  pinfold host set h1 --memory +4GiB
  pinfold host set h1 --memory 60GiB --numa-memory 0=30GiB --numa-memory 1=30GiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if !slices.ContainsFunc(hostSetChanges, cmd.Flags().Changed) {
				return badInput("host set %s: nothing to change: give at least one of --%s", args[0], strings.Join(hostSetChanges, ", --"))
			}
			req := &pinfoldv1.SetHostRequest{Name: args[0], AddCpus: map[int32]int32{}, NumaMemoryBytes: map[int32]int64{}}
			if addCPUs != "" {
				set, err := cpuset.ParseCPUs(addCPUs)
				if err != nil {
					return badInput("--add-cpus %q: %v", addCPUs, err)
				}
				if pieces <= 0 {
					return badInput("--pieces %d: want the pieces of each added CPU (e.g. 100)", pieces)
				}
				for id := range set.All() {
					req.AddCpus[int32(id)] = pieces
				}
			}
			if _, err := cpuset.ParseCPUs(rmCPUs); err != nil {
				return badInput("--remove-cpus %q: %v", rmCPUs, err)
			}
			req.RemoveCpus = rmCPUs
			if memory != "" {
				if strings.HasPrefix(memory, "+") || strings.HasPrefix(memory, "-") {
					d, err := parseSize("--memory", memory, true)
					if err != nil {
						return err
					}
					req.MemoryDeltaBytes = d
				} else {
					m, err := parseSize("--memory", memory, false)
					if err != nil {
						return err
					}
					req.MemoryBytes = &m
				}
			}
			for _, nm := range numaMems {
				k, v, ok := strings.Cut(nm, "=")
				id, err := strconv.Atoi(k)
				if !ok || err != nil || id < 0 || id > cpuset.MaxID {
					return badInput("--numa-memory %q: want NODE=SIZE with NODE 0..%d, e.g. 0=30GiB", nm, cpuset.MaxID)
				}
				b, err := parseSize("--numa-memory", v, false)
				if err != nil {
					return err
				}
				req.NumaMemoryBytes[int32(id)] = b
			}
			if len(props) > 0 {
				req.SetProperties = map[string]string{}
			}
			for _, kv := range props {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return badInput("--property %q: want KEY=VALUE, e.g. HasSSD=true", kv)
				}
				req.SetProperties[k] = v
			}
			req.RemoveProperties = rmProps
			f := cmd.Flags()
			if f.Changed("fault-domain") {
				req.FaultDomain = &fd
			}
			if f.Changed("upgrade-domain") {
				req.UpgradeDomain = &ud
			}
			if f.Changed("host-type") {
				req.HostType = &hostType
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.SetHost(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), toHostJSON(resp.Msg.Host))
				}
				h := resp.Msg.Host
				fmt.Fprintf(cmd.OutOrStdout(), "host %s: %d CPUs (%s CPUs of capacity), %s memory\n", h.Name, len(h.CapacityCpus),
					cpuAmount(sumPieces(h.CapacityCpus), h.ShareBase), formatBytes(h.CapacityMemoryBytes))
				return nil
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, true, false, false)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&addCPUs, "add-cpus", "", "CPUs to add to capacity (list format)")
	cmd.Flags().Int32Var(&pieces, "pieces", 0, "pieces for each CPU of --add-cpus")
	cmd.Flags().StringVar(&rmCPUs, "remove-cpus", "", "CPUs to take out of capacity (list format)")
	cmd.Flags().StringVar(&memory, "memory", "", "memory capacity: SIZE (absolute) or +SIZE/-SIZE (delta)")
	cmd.Flags().StringArrayVar(&numaMems, "numa-memory", nil, "NUMA node memory, NODE=SIZE (repeatable)")
	cmd.Flags().StringArrayVar(&props, "property", nil, "placement property KEY=VALUE (repeatable)")
	cmd.Flags().StringArrayVar(&rmProps, "remove-property", nil, "remove a placement property (repeatable)")
	cmd.Flags().StringVar(&fd, "fault-domain", "", `fault domain, e.g. fd:/dc1/rack2 ("" clears it)`)
	cmd.Flags().StringVar(&ud, "upgrade-domain", "", `upgrade domain, e.g. UD1 ("" clears it)`)
	cmd.Flags().StringVar(&hostType, "host-type", "", "the built-in HostType property")
	return cmd
}

// hostSetChanges are host set's flags that change something (the others
// say where and how to call).
var hostSetChanges = []string{"add-cpus", "remove-cpus", "memory", "numa-memory", "property", "remove-property", "fault-domain", "upgrade-domain", "host-type"}

func newHostMaintenanceCmd() *cobra.Command {
	var (
		c     clientFlags
		out   outputFlag
		grace time.Duration
		off   bool
	)
	cmd := &cobra.Command{
		Use:   "maintenance NAME (--grace DURATION | --off)",
		Short: "Put a host in maintenance (keeps its instances, takes nothing new) or end it",
		Long: `A host in maintenance keeps its instances and receives nothing new.
Its agent may stop heartbeating (a reboot, a daemon upgrade) for up to the
grace period without the host being reported down; past it, 'pinfold health'
warns that its instances are not running. --off ends the maintenance.`,
		Example: `  pinfold host maintenance h1 --grace 10m
  pinfold host maintenance h1 --off`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if off && cmd.Flags().Changed("grace") {
				return badInput("--grace and --off exclude each other: give --grace DURATION to start (or extend) a maintenance, --off to end it")
			}
			if !off && grace == 0 && !cmd.Flags().Changed("grace") {
				return badInput("give --grace DURATION (e.g. 10m) or --off")
			}
			if !off && grace < time.Second {
				return badInput("--grace %s: want at least 1s", grace)
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				// Read first, for the words only: whether --off ends a maintenance.
				wasIn := true
				if off {
					if before, err := cl.GetHost(cmd.Context(), connect.NewRequest(&pinfoldv1.GetHostRequest{Name: args[0]})); err == nil {
						wasIn = before.Msg.GetHost().GetMaintenanceUntil() != ""
					}
				}
				resp, err := cl.SetHostMaintenance(cmd.Context(), connect.NewRequest(&pinfoldv1.SetHostMaintenanceRequest{Name: args[0],
					GraceSeconds: int64(grace / time.Second), Off: off}))
				if err != nil {
					return err
				}
				h := resp.Msg.Host
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), toHostJSON(h))
				}
				if off && !wasIn {
					fmt.Fprintf(cmd.OutOrStdout(), "host %s: not in maintenance; state %s\n", h.Name, h.State)
				} else if off {
					fmt.Fprintf(cmd.OutOrStdout(), "host %s: maintenance ended, state %s\n", h.Name, h.State)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "host %s: in maintenance until %s (keeps its instances, takes nothing new)\n", h.Name, h.MaintenanceUntil)
				}
				return nil
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, true, false, false)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().DurationVar(&grace, "grace", 0, "how long the host may be away without being reported down")
	cmd.Flags().BoolVar(&off, "off", false, "end the maintenance")
	return cmd
}

func newHostEnableCmd(enable bool) *cobra.Command {
	var (
		c   clientFlags
		out outputFlag
	)
	use, short := "disable NAME", "Stop placing new work on a host (its instances keep running)"
	long := short + "."
	if enable {
		use, short = "enable NAME", "Let a disabled host take new work again"
		long = short + ". A drain in progress on it ends, as with\n'pinfold host drain --cancel' (moves in flight settle): work placed on it\nstays there."
	}
	verb := strings.Fields(use)[0]
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: "  pinfold host " + verb + " h1\n  pinfold host " + verb + " h1 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				// Read first, for the words only: whether this ends a drain.
				wasDraining := false
				if before, err := cl.GetHost(cmd.Context(), connect.NewRequest(&pinfoldv1.GetHostRequest{Name: args[0]})); err == nil {
					wasDraining = before.Msg.GetHost().GetDraining()
				}
				resp, err := cl.SetHostEnabled(cmd.Context(), connect.NewRequest(&pinfoldv1.SetHostEnabledRequest{Name: args[0], Enabled: enable}))
				if err != nil {
					return err
				}
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), toHostJSON(resp.Msg.Host))
				}
				fmt.Fprintln(cmd.OutOrStdout(), enabledLine(args[0], enable, wasDraining && !resp.Msg.Host.GetDraining(), resp.Msg.Host.State))
				return nil
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, true, false, false)
	c.register(cmd)
	out.register(cmd)
	return cmd
}

// enabledLine is what host enable or disable says: the host's state, and
// that a drain ended or that the host still takes no work, and why.
func enabledLine(name string, enable, endedDrain bool, state string) string {
	switch {
	case !enable:
		return fmt.Sprintf("host %s is %s: no new work is placed on it; its instances keep running", name, state)
	case endedDrain && state == "up":
		return fmt.Sprintf("host %s is up; its drain ended (instances already moved stay where they are)", name)
	case state == "up":
		return fmt.Sprintf("host %s is up", name)
	}
	var why string
	switch state {
	case "maintenance":
		why = fmt.Sprintf("it is in maintenance: it takes no new work until that ends ('pinfold host maintenance %s --off' ends it now)", name)
	case "down":
		why = "it is down: it takes no new work until its agent reports again"
	case "protocol":
		why = "its agent speaks another protocol than the planner (state protocol): it takes no new work until they match"
	default:
		why = fmt.Sprintf("it is %s: it takes no new work until that ends", state)
	}
	if endedDrain {
		return fmt.Sprintf("host %s is enabled and its drain ended, but %s", name, why)
	}
	return fmt.Sprintf("host %s is enabled, but %s", name, why)
}

func newHostRemoveCmd() *cobra.Command {
	var (
		c   clientFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Unregister a host; its instances are placed again on other hosts first",
		Long: `Unregister a host. Its instances are placed again on other hosts first, through
the same placement rules as a deploy (they may use the buffer and the
overbooking, as any replacement of failed instances): the old instances are
released at once, and the host's agent, if it still runs, removes their
containers. When an instance cannot be placed elsewhere (checked for all of
them first), nothing changes and the error names it.
To move live work with health gates first, use 'pinfold host drain'.`,
		Example: `  pinfold host remove h3
  pinfold host drain h3 && pinfold host remove h3   # blue-green first`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.RemoveHost(cmd.Context(), connect.NewRequest(&pinfoldv1.RemoveHostRequest{Name: args[0]}))
				if err != nil {
					return err
				}
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), map[string]any{"host": args[0], "removed": true, "moved": movesJSON(resp.Msg.Moved)})
				}
				for _, m := range resp.Msg.Moved {
					fmt.Fprintf(cmd.OutOrStdout(), "%s (%s) placed again on %s as %s\n", m.Instance, m.Service, m.To, m.NewInstance)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "host %s removed\n", args[0])
				return nil
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, true, false, false)
	c.register(cmd)
	out.register(cmd)
	return cmd
}

func newHostDrainCmd() *cobra.Command {
	var (
		c         clientFlags
		out       outputFlag
		deadline  time.Duration
		noWait    bool
		cancel    bool
		moveLocal bool
	)
	cmd := &cobra.Command{
		Use:   "drain NAME [--deadline D] [--no-wait | --cancel]",
		Short: "Move every instance off a host, blue-green, and leave it disabled",
		Long: `Disable a host and move each of its instances to another host through the
same placement rules as a deploy: a new instance starts elsewhere, and the old
one is removed only once the new one runs and passed its health gate on its
host. The planner carries the drain on in the background (also after a
planner restart) until the host holds no instances; it then stays disabled.
This command shows the progress until then (--no-wait returns at once).

--deadline bounds the wait for health gates: past it, an old instance is
removed as soon as its replacement exists, healthy or not. An instance that
cannot be placed anywhere stays, and the drain says why ('Stuck:' in the
progress and in 'pinfold host show'); after 3 failures in a row it is parked,
tried again every minute, and this command exits 1 with the reason (the
drain goes on in the background). Run again after a lost connection, drain
picks up where it is.
--cancel stops starting moves (those in flight settle; the host stays
disabled; 'pinfold host enable' lets it take work again, and ends a drain
in progress too).

An instance with a host-local volume (--volume: a bind mount or a named
volume) stays: its data lives on this host. The drain moves the others,
then says which stay and exits 1; --move-local-volumes (also given again
to a drain under way) moves them too, their volumes left behind. The heal
of a DOWN host does place them elsewhere.`,
		Example: `  pinfold host drain h3
  pinfold host drain h3 --deadline 10m
  pinfold host drain h3 --no-wait -o json
  pinfold host drain h3 --cancel
  pinfold host drain h3 --move-local-volumes   # instances with volumes too`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if deadline < 0 {
				return badInput("--deadline %s: want 0 (none) or more", deadline)
			}
			name := args[0]
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				// Read first, for the words only: whether --cancel ends a drain.
				wasDraining := false
				if cancel {
					if before, err := cl.GetHost(cmd.Context(), connect.NewRequest(&pinfoldv1.GetHostRequest{Name: name})); err == nil {
						wasDraining = before.Msg.GetHost().GetDraining()
					}
				}
				resp, err := cl.DrainHost(cmd.Context(), connect.NewRequest(&pinfoldv1.DrainHostRequest{Name: name,
					DeadlineSeconds: int64(deadline / time.Second), Cancel: cancel, MoveLocalVolumes: moveLocal}))
				if err != nil {
					return err
				}
				h := resp.Msg.Host
				if cancel || noWait {
					if out.json() {
						return writeJSON(cmd.OutOrStdout(), toHostJSON(h))
					}
					what := "draining in the background"
					switch {
					case cancel && !wasDraining:
						what = "no drain in progress; state " + h.GetState()
					case cancel && h.GetState() == "disabled":
						what = fmt.Sprintf("drain cancelled; stays disabled ('pinfold host enable %s' lets it take work again)", name)
					case cancel:
						what = "drain cancelled; state " + h.GetState()
					}
					fmt.Fprintf(cmd.OutOrStdout(), "host %s: %s\n", name, what)
					return nil
				}
				return waitDrain(cmd, cl, name, out.json(), moveLocal)
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, true, false, false)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().DurationVar(&deadline, "deadline", 0, "past it, old instances go once their replacements exist, healthy or not (0: none)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the drain is recorded; the planner carries it on")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "stop the drain")
	cmd.Flags().BoolVar(&moveLocal, "move-local-volumes", false, "also move instances with a host-local volume (bind mount or named volume); their data stays behind")
	cmd.MarkFlagsMutuallyExclusive("no-wait", "cancel")
	cmd.MarkFlagsMutuallyExclusive("move-local-volumes", "cancel")
	return cmd
}

// waitDrain shows a drain's progress until the host holds no instances
// and the drain ended, then the host's state; without moveLocal it ends
// (exit 1) when only instances with a host-local volume are left.
func waitDrain(cmd *cobra.Command, cl pinfoldv1connect.PlannerServiceClient, name string, asJSON, moveLocal bool) error {
	total, last := -1, ""
	for {
		resp, err := cl.GetHost(cmd.Context(), connect.NewRequest(&pinfoldv1.GetHostRequest{Name: name}))
		if err != nil {
			return err
		}
		left := len(resp.Msg.Instances)
		if total < left {
			total = left
		}
		line := fmt.Sprintf("drain %s: %d of %d instances moved", name, total-left, total)
		if s := resp.Msg.Host.Stuck; s != "" {
			line += "; stuck: " + s
			if strings.Contains(s, "(parked") {
				if line != last && !asJSON {
					fmt.Fprintln(cmd.ErrOrStderr(), line)
				}
				return &exitError{code: exitUnmet, err: fmt.Errorf("drain of %s is parked: %s; the planner tries again in the background ('pinfold host show %s'; 'pinfold host drain %s --cancel' stops it)", name, s, name, name)}
			}
		}
		if line != last && !asJSON {
			fmt.Fprintln(cmd.ErrOrStderr(), line)
			last = line
		}
		if local := hostLocal(resp.Msg.Instances); !moveLocal && left > 0 && len(local) == left && resp.Msg.Host.Draining {
			return &exitError{code: exitUnmet, err: fmt.Errorf("drain of %s: %d instances stay, each with a host-local volume (%s); 'pinfold host drain %s --move-local-volumes' moves them (their data stays behind), '--cancel' ends the drain",
				name, left, strings.Join(local, ", "), name)}
		}
		if h := resp.Msg.Host; left == 0 && !h.Draining {
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toHostJSON(h))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "host %s drained: %s moved; it is %s\n", name, instances(total), h.State)
			return nil
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// hostLocal describes the instances of ins that have a host-local volume
// ("db-1: bind /srv/db"); only when every one of ins has one, else nil.
func hostLocal(ins []*pinfoldv1.Instance) []string {
	var out []string
	for _, in := range ins {
		v := in.Model().HostLocal()
		if v == "" {
			return nil
		}
		out = append(out, in.Id+": "+v)
	}
	return out
}

// agentState says in words what enforces the host's plan.
func agentState(h *pinfoldv1.Host) string {
	switch {
	case !h.Agent && h.NoAgent != "":
		return "no agent: " + h.NoAgent
	case !h.Agent:
		return "no agent (registered by hand: its instances stay pending until an agent registers it)"
	case h.State == "down" && h.NoAgent != "":
		return "agent " + h.AgentVersion + " not heartbeating (down): " + h.NoAgent
	case h.State == "down":
		return "agent " + h.AgentVersion + " not heartbeating (down)"
	}
	return "agent " + h.AgentVersion + " heartbeating"
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

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
	NoAgent          string             `json:"no_agent,omitempty"`     // why no agent enforces it, when known
	OverNominal      []string           `json:"over_nominal,omitempty"` // past its nominal capacity (the overbooking in use): "memory 15.5 GiB/14.4 GiB"
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
		SharedPool: h.SharedPoolPieces, MemoryFirstQuota: h.MemoryFirstQuotaPieces, Draining: h.Draining, DrainDeadline: h.DrainDeadline, Stuck: h.Stuck, NoAgent: h.NoAgent, OverNominal: h.OverNominal}
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
					over := "" // no host had nominal room: the why says what the host holds past it
					if _, what, ok := strings.Cut(m.Why, "using overbooking: "); ok {
						over = " using overbooking: " + what
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s (%s) placed again on %s as %s%s\n", m.Instance, m.Service, m.To, m.NewInstance, over)
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

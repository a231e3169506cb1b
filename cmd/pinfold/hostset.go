package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

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

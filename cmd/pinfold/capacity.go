package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

func newCapacityCmd() *cobra.Command {
	var (
		c                      clientFlags
		out                    outputFlag
		cpu, memory, service   string
		constraint             string
		bind, useBuffer        bool
		wholeCores             bool
		maxPerHost             int
		affinity, antiAffinity []string
	)
	cmd := &cobra.Command{
		Use:   "capacity --cpu X --memory SIZE [--bind] [deploy's placement flags]",
		Short: "How many instances of a size the live hosts could take (dry run)",
		Long: `Count, per host that may take work, how many instances of a size it could
take now, under the same rules and settings a deploy with the same flags
applies: the cluster's buffer (or, with --use-buffer, its overbooking),
--constraint, --affinity/--anti-affinity, --max-per-host (counting
--service's instances). A deploy of the total succeeds and one more does
not, unless a fault/upgrade domain spread limits where they may go.`,
		Example: `  pinfold capacity --cpu 1.7 --bind --memory 1GiB
  pinfold capacity --cpu 0.5 --memory 256MiB --use-buffer
  pinfold capacity --cpu 4 --bind --whole-cores --memory 8GiB
  pinfold capacity --cpu 2 --bind --memory 4GiB --constraint 'disk == "ssd"' --service web --max-per-host 2 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			perHost, err := int32Of("--max-per-host", maxPerHost, 0, math.MaxInt32)
			if err != nil {
				return err
			}
			cpuS, mem, err := parseCPUAndMemory(cpu, memory)
			if err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Capacity(cmd.Context(), connect.NewRequest(&pinfoldv1.CapacityRequest{Cpu: cpuS, Bind: bind, WholeCores: wholeCores, MemoryBytes: mem,
					Service: service, MaxPerHost: perHost, UseBuffer: useBuffer, Constraint: constraint,
					AffinityHard: affinity, AntiAffinityHard: antiAffinity}))
				if err != nil {
					return err
				}
				// Bound instances leave the CPUs kept for memory-first
				// quotas free: say so per host, as host show does.
				kept := map[string]memoryFirstKeep{}
				if bind {
					if kept, err = keptForMemoryFirstAll(cmd.Context(), cl, resp.Msg.Capacity); err != nil {
						return err
					}
				}
				if out.json() {
					keptCPUs := map[string]int{}
					for h, k := range kept {
						keptCPUs[h] = k.Count
					}
					return writeJSON(cmd.OutOrStdout(), map[string]any{"capacity": resp.Msg.Capacity, "total_capacity": resp.Msg.Total, "limit": resp.Msg.Limit,
						"kept_for_memory_first_count": keptCPUs})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "HOST\tCAPACITY\tLIMITED BY")
				for _, h := range slices.Sorted(maps.Keys(resp.Msg.Capacity)) {
					fmt.Fprintf(tw, "%s\t%d\t%s\n", h, resp.Msg.Capacity[h], resp.Msg.Limit[h])
				}
				fmt.Fprintf(tw, "total\t%d\t\n", resp.Msg.Total)
				if err := tw.Flush(); err != nil {
					return err
				}
				for _, h := range slices.Sorted(maps.Keys(kept)) {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", h, kept[h].explain())
				}
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&cpu, "cpu", "1", "CPUs per instance, a decimal of whole pieces (0.01 CPU at the default share base)")
	cmd.Flags().StringVar(&memory, "memory", "", "memory per instance")
	cmd.Flags().BoolVar(&bind, "bind", false, "CPU-bound instances")
	cmd.Flags().BoolVar(&wholeCores, "whole-cores", false, "count whole physical cores only, as deploy --whole-cores")
	cmd.Flags().StringVar(&service, "service", "", "the service whose instances --max-per-host and the affinity rules count")
	cmd.Flags().IntVar(&maxPerHost, "max-per-host", 0, "at most this many of --service's instances per host (0: no limit)")
	cmd.Flags().BoolVar(&useBuffer, "use-buffer", false, "may use the hosts' buffered (or overbooked) capacity, as replacements do")
	cmd.Flags().StringVar(&constraint, "constraint", "", `host properties the hosts must match, e.g. "HasSSD == true"`)
	cmd.Flags().StringArrayVar(&affinity, "affinity", nil, "only hosts running this service (repeatable)")
	cmd.Flags().StringArrayVar(&antiAffinity, "anti-affinity", nil, "never hosts running this service (repeatable)")
	_ = cmd.MarkFlagRequired("memory")
	return cmd
}

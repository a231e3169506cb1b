package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/api/pinfoldv1"
	"github.com/pinfold/pinfold/planner/api/pinfoldv1/pinfoldv1connect"
	"github.com/pinfold/pinfold/planner/placement"
)

// ruleFlags are a deploy's placement rules.
type ruleFlags struct {
	constraint, policy, spread   string
	aff, softAff, anti, softAnti []string
	order                        []string
	useBuffer                    bool
}

func (r *ruleFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&r.constraint, "constraint", "", `host properties the hosts must match, e.g. "HasSSD == true && SomeProperty >= 4"`)
	f.StringArrayVar(&r.aff, "affinity", nil, "only hosts running this service (repeatable)")
	f.StringArrayVar(&r.softAff, "soft-affinity", nil, "prefer hosts running this service (repeatable)")
	f.StringArrayVar(&r.anti, "anti-affinity", nil, "never hosts running this service (repeatable)")
	f.StringArrayVar(&r.softAnti, "soft-anti-affinity", nil, "avoid hosts running this service (repeatable)")
	f.StringVar(&r.policy, "placement-policy", "", "rank hosts: nodes_order, load_avg or spread")
	f.StringSliceVar(&r.order, "hosts-order", nil, "host order for nodes_order, first = highest priority (comma-separated)")
	f.StringVar(&r.spread, "domain-spread", "", "fault/upgrade domain rule: adaptive (default), max_difference, quorum_safe or off")
	f.BoolVar(&r.useBuffer, "use-buffer", false, "may use the hosts' buffered capacity (replacing failed instances, upgrades)")
	_ = cmd.RegisterFlagCompletionFunc("placement-policy", cobra.FixedCompletions([]string{"nodes_order", "load_avg", "spread"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("domain-spread", cobra.FixedCompletions([]string{"adaptive", "max_difference", "quorum_safe", "off"}, cobra.ShellCompDirectiveNoFileComp))
}

// apply sets the rules on the request; the planner validates them where
// the request enters (a bad rule is its InvalidArgument: exit 2, naming
// the field).
func (r *ruleFlags) apply(d *pinfoldv1.DeployRequest) error {
	d.Constraint, d.PlacementPolicy, d.HostsOrder, d.DomainSpread, d.UseBuffer = r.constraint, r.policy, r.order, r.spread, r.useBuffer
	d.AffinityHard, d.AffinitySoft, d.AntiAffinityHard, d.AntiAffinitySoft = r.aff, r.softAff, r.anti, r.softAnti
	return nil
}

func newHealthCmd() *cobra.Command {
	var (
		c   clientFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "List standing placement rule violations (health warnings)",
		Example: `  pinfold health
  pinfold health -o json`,
		Long: `Health warnings: what the planner's rules say no longer holds,
typically after a host changed: a host over capacity, instances on hosts
their service's constraint no longer matches, a service packed into too few
fault or upgrade domains, a host past its maintenance grace, a down host
that holds instances. Exit code 0 when there are none, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Health(cmd.Context(), connect.NewRequest(&pinfoldv1.HealthRequest{}))
				if err != nil {
					return err
				}
				ws := resp.Msg.Warnings
				if out.json() {
					list := []map[string]string{}
					for _, w := range ws {
						list = append(list, map[string]string{"kind": w.Kind, "subject": w.Subject, "detail": w.Detail})
					}
					if err := writeJSON(cmd.OutOrStdout(), map[string]any{"warnings": list}); err != nil {
						return err
					}
				} else if len(ws) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "healthy: every placement rule holds")
				} else {
					tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "WARNING\tSUBJECT\tDETAIL")
					for _, w := range ws {
						fmt.Fprintf(tw, "%s\t%s\t%s\n", w.Kind, w.Subject, w.Detail)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if len(ws) > 0 {
					return &exitError{code: exitUnmet, err: fmt.Errorf("%d health warnings", len(ws))}
				}
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	return cmd
}

func newSettingsCmd() *cobra.Command {
	var (
		c                   clientFlags
		out                 outputFlag
		buffer, over, prios []string
		downGrace           time.Duration
	)
	show := func(cmd *cobra.Command, ps *pinfoldv1.PlacementSettings, asJSON bool) error {
		if asJSON {
			return writeJSON(cmd.OutOrStdout(), map[string]any{"buffer_percent": orEmpty(ps.BufferPercent),
				"overbooking_percent": orEmpty(ps.OverbookingPercent), "constraint_priorities": ps.ConstraintPriorities,
				"down_grace_seconds": ps.DownGraceSeconds})
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SETTING\tVALUE")
		for _, r := range placement.Resources {
			b, hasB := ps.BufferPercent[r]
			o, hasO := ps.OverbookingPercent[r]
			v := "none: normal placement may use all of it"
			switch {
			case hasB:
				v = fmt.Sprintf("buffer %g%%: normal placement uses %g%%, replacements and upgrades 100%%", b*100, 100-b*100)
			case hasO && o == -1:
				v = "overbooking unlimited: normal placement uses 100%, replacements and upgrades unlimited"
			case hasO:
				v = fmt.Sprintf("overbooking %g%%: normal placement uses 100%%, replacements and upgrades %g%%", o*100, 100+o*100)
			}
			fmt.Fprintf(tw, "%s\t%s\n", r, v)
		}
		names := map[int32]string{-1: "off", 0: "hard", 1: "soft", 2: "optimization"}
		for _, r := range slices.Sorted(maps.Keys(placement.DefaultPriorities)) {
			p := int32(placement.DefaultPriorities[r])
			src := "default"
			if v, ok := ps.ConstraintPriorities[r]; ok {
				p, src = v, "set"
			}
			fmt.Fprintf(tw, "%s priority\t%d (%s, %s)\n", r, p, names[p], src)
		}
		fmt.Fprintf(tw, "down grace\t%s (a host's agent gone this long: its instances are placed again elsewhere)\n", time.Duration(ps.DownGraceSeconds)*time.Second)
		return tw.Flush()
	}
	cmd := &cobra.Command{
		Use:   "settings [--buffer RES=F] [--overbooking RES=F] [--priority RULE=P] [--down-grace D]",
		Short: "Show or change the cluster's placement settings (buffer, overbooking, rule priorities, down grace)",
		Long: `Without flags, show the settings. Per resource (cpu, memory) a host buffer
(kept free in normal placement, usable for replacing failed instances and
upgrades: capacity 100 with a 0.2 buffer gives 80 normally, 100 then) or an
overbooking (capacity 100 with 0.2 gives 100 normally, 120 then; -1 =
unlimited), never both. Rule priorities: -1 off,
0 hard, 1 soft, 2 optimization; defaults PlacementConstraint 0,
NodeCapacity 0, Affinity 0, FaultDomain 0, UpgradeDomain 1,
PreferredLocation 2. Setting replaces all three maps at once.

--down-grace (default 5m) is how long a host's agent may be gone before the
host's instances are placed again on other hosts (through the same rules;
they may use the buffer and the overbooking). When the agent returns, it
removes the containers of the instances that moved first. Changing only the
down grace keeps the other settings.`,
		Example: `  pinfold settings
  pinfold settings --buffer cpu=0.15 --overbooking memory=0.2 --priority UpgradeDomain=0
  pinfold settings --down-grace 2m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			ps := &pinfoldv1.PlacementSettings{BufferPercent: map[string]float64{}, OverbookingPercent: map[string]float64{}, ConstraintPriorities: map[string]int32{}}
			parse := func(flag string, kvs []string, into func(k string, v float64)) error {
				for _, kv := range kvs {
					k, v, ok := strings.Cut(kv, "=")
					f, err := strconv.ParseFloat(v, 64)
					if !ok || err != nil {
						return badInput("--%s %q: want KEY=NUMBER", flag, kv)
					}
					into(k, f)
				}
				return nil
			}
			if err := parse("buffer", buffer, func(k string, v float64) { ps.BufferPercent[k] = v }); err != nil {
				return err
			}
			if err := parse("overbooking", over, func(k string, v float64) { ps.OverbookingPercent[k] = v }); err != nil {
				return err
			}
			for _, kv := range prios {
				k, v, ok := strings.Cut(kv, "=")
				n, err := strconv.Atoi(v)
				if !ok || err != nil {
					return badInput("--priority %q: want RULE=P with P one of -1, 0, 1, 2", kv)
				}
				ps.ConstraintPriorities[k] = int32(n)
			}
			local := placement.Settings{Buffer: ps.BufferPercent, Overbooking: ps.OverbookingPercent, Priorities: map[placement.Rule]placement.Priority{}}
			for k, v := range ps.ConstraintPriorities {
				local.Priorities[k] = placement.Priority(v)
			}
			if err := local.Validate(); err != nil {
				return badInput("%v", err)
			}
			if cmd.Flags().Changed("down-grace") && (downGrace < time.Second || downGrace > placement.MaxDownGrace) {
				return badInput("--down-grace %s: want 1s..%s", downGrace, placement.MaxDownGrace)
			}
			setMaps := len(buffer)+len(over)+len(prios) > 0
			set := setMaps || cmd.Flags().Changed("down-grace")
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				var got *pinfoldv1.PlacementSettings
				if set {
					cur, err := cl.GetPlacementSettings(cmd.Context(), connect.NewRequest(&pinfoldv1.GetPlacementSettingsRequest{}))
					if err != nil {
						return err
					}
					if !setMaps {
						ps = cur.Msg // only the down grace changes
					}
					ps.DownGraceSeconds = cur.Msg.DownGraceSeconds
					if cmd.Flags().Changed("down-grace") {
						ps.DownGraceSeconds = int64(downGrace / time.Second)
					}
					resp, err := cl.SetPlacementSettings(cmd.Context(), connect.NewRequest(ps))
					if err != nil {
						return err
					}
					got = resp.Msg
				} else {
					resp, err := cl.GetPlacementSettings(cmd.Context(), connect.NewRequest(&pinfoldv1.GetPlacementSettingsRequest{}))
					if err != nil {
						return err
					}
					got = resp.Msg
				}
				return show(cmd, got, out.json())
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringArrayVar(&buffer, "buffer", nil, "buffer fraction per resource, RES=F (cpu=0.15)")
	cmd.Flags().StringArrayVar(&over, "overbooking", nil, "overbooking fraction per resource, RES=F (memory=0.2; -1 unlimited)")
	cmd.Flags().StringArrayVar(&prios, "priority", nil, "rule priority RULE=P (UpgradeDomain=0)")
	cmd.Flags().DurationVar(&downGrace, "down-grace", 0, "how long a host's agent may be gone before its instances are placed elsewhere (default 5m)")
	return cmd
}

func orEmpty(m map[string]float64) map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	return m
}

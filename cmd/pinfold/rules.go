package main

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
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
					return &exitError{code: exitUnmet, err: errors.New(counted(len(ws), "health warning"))}
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
		clear               []string
		downGrace           time.Duration
	)
	show := func(cmd *cobra.Command, ps *pinfoldv1.PlacementSettings, asJSON bool) error {
		if asJSON {
			return writeJSON(cmd.OutOrStdout(), map[string]any{"buffer_percent": orEmpty(ps.BufferPercent),
				"overbooking_percent": orEmpty(ps.OverbookingPercent), "constraint_priorities": orEmptyPriorities(ps.ConstraintPriorities),
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
		Use:   "settings [--buffer RES=F] [--overbooking RES=F] [--priority RULE=P] [--clear MAP] [--down-grace D]",
		Short: "Show or change the cluster's placement settings (buffer, overbooking, rule priorities, down grace)",
		Long: `Without flags, show the settings. Per resource (cpu, memory) a host buffer
(kept free in normal placement, usable for replacing failed instances and
upgrades: capacity 100 with a 0.2 buffer gives 80 normally, 100 then) or an
overbooking (capacity 100 with 0.2 gives 100 normally, 120 then; -1 =
unlimited), never both. Rule priorities: -1 off,
0 hard, 1 soft, 2 optimization; defaults PlacementConstraint 0,
NodeCapacity 0, Affinity 0, FaultDomain 0, UpgradeDomain 1,
PreferredLocation 2. NodeCapacity off only stops it ruling hosts out before
the CPUs are assigned: no setting places an instance past a host's CPUs and
memory.

A change touches only what it names: --buffer cpu=0.15 sets the CPU buffer
and keeps the memory buffer, the overbooking, the priorities and the down
grace as they are. KEY= with no value removes that key (--buffer cpu=: no
CPU buffer; --priority UpgradeDomain=: back to its default); --clear buffer,
--clear overbooking or --clear priority empties a whole map first (the
other flags of the same call then apply). To switch a resource from a
buffer to an overbooking, remove one as you set the other:
--buffer cpu= --overbooking cpu=0.2.

--down-grace (default 5m) is how long a host's agent may be gone before the
host's instances are placed again on other hosts (through the same rules;
they may use the buffer and the overbooking). When the agent returns, it
removes the containers of the instances that moved first.`,
		Example: `  pinfold settings
  pinfold settings --buffer cpu=0.15 --overbooking memory=0.2 --priority UpgradeDomain=0
  pinfold settings --priority UpgradeDomain=        # back to the default priority
  pinfold settings --buffer cpu= --overbooking cpu=0.1
  pinfold settings --clear buffer,overbooking
  pinfold settings --down-grace 2m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			var ch settingsChange
			if err := ch.parse(buffer, over, prios, clear); err != nil {
				return err
			}
			if cmd.Flags().Changed("down-grace") && (downGrace < time.Second || downGrace > placement.MaxDownGrace) {
				return badInput("--down-grace %s: want 1s..%s", downGrace, placement.MaxDownGrace)
			}
			set := !ch.empty() || cmd.Flags().Changed("down-grace")
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				cur, err := cl.GetPlacementSettings(cmd.Context(), connect.NewRequest(&pinfoldv1.GetPlacementSettingsRequest{}))
				if err != nil {
					return err
				}
				got := cur.Msg
				if set {
					ps := ch.apply(cur.Msg)
					if cmd.Flags().Changed("down-grace") {
						ps.DownGraceSeconds = int64(downGrace / time.Second)
					}
					if err := validSettings(ps); err != nil {
						return err
					}
					resp, err := cl.SetPlacementSettings(cmd.Context(), connect.NewRequest(ps))
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
	cmd.Flags().StringArrayVar(&buffer, "buffer", nil, "buffer per resource, RES=F as a fraction or a percentage (cpu=0.15 or cpu=15%; cpu= removes it)")
	cmd.Flags().StringArrayVar(&over, "overbooking", nil, "overbooking per resource, RES=F as a fraction or a percentage (memory=0.2 or memory=20%; -1 unlimited; memory= removes it)")
	cmd.Flags().StringArrayVar(&prios, "priority", nil, "rule priority RULE=P (UpgradeDomain=0; UpgradeDomain= back to the default)")
	cmd.Flags().StringSliceVar(&clear, "clear", nil, "empty whole maps first: buffer, overbooking, priority (comma-separated or repeated)")
	cmd.Flags().DurationVar(&downGrace, "down-grace", 0, "how long a host's agent may be gone before its instances are placed elsewhere (default 5m)")
	_ = cmd.RegisterFlagCompletionFunc("clear", cobra.FixedCompletions([]string{"buffer", "overbooking", "priority"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// settingsChange is what one settings call asks: maps to empty, then keys
// to set and keys to remove in each map. Everything else stays.
type settingsChange struct {
	clear            map[string]bool // "buffer", "overbooking", "priority"
	buffer, over     map[string]float64
	prios            map[string]int32
	noBuffer, noOver []string
	noPrio           []string
}

func (ch *settingsChange) empty() bool {
	return len(ch.clear)+len(ch.buffer)+len(ch.over)+len(ch.prios)+len(ch.noBuffer)+len(ch.noOver)+len(ch.noPrio) == 0
}

// parse reads the flags; a bad one is refused before the planner is asked.
func (ch *settingsChange) parse(buffer, over, prios, clear []string) error {
	ch.clear, ch.buffer, ch.over, ch.prios = map[string]bool{}, map[string]float64{}, map[string]float64{}, map[string]int32{}
	for _, m := range clear {
		m = strings.TrimSpace(m)
		if m != "buffer" && m != "overbooking" && m != "priority" {
			return badInput("--clear %q: want buffer, overbooking or priority", m)
		}
		ch.clear[m] = true
	}
	fractions := func(flag string, kvs []string, set map[string]float64, remove *[]string) error {
		for _, kv := range kvs {
			k, v, ok := strings.Cut(kv, "=")
			if ok && v == "" && k != "" {
				if !slices.Contains(placement.Resources, k) {
					return badInput("--%s %q: unknown resource %q; want %s", flag, kv, k, strings.Join(placement.Resources, " or "))
				}
				*remove = append(*remove, k)
				continue
			}
			if !slices.Contains(placement.Resources, k) {
				return badInput("--%s %q: unknown resource %q; want %s", flag, kv, k, strings.Join(placement.Resources, " or "))
			}
			// A fraction (0.2) or a percentage (20%); a bare number
			// above 1 is refused (a new user's trial: memory=20 meant
			// 20 % and set 2,000 %).
			num, percent := strings.CutSuffix(v, "%")
			f, err := strconv.ParseFloat(num, 64)
			if !ok || err != nil {
				return badInput("--%s %q: want RES=FRACTION (0.2), RES=PERCENT (20%%), or RES= to remove it", flag, kv)
			}
			if percent {
				f /= 100
			} else if f > 1 {
				return badInput("--%s %s=%s: a fraction (0.2 = 20%%): write %s=%s%% if %s %% is meant", flag, k, v, k, v, v)
			}
			set[k] = f
		}
		return nil
	}
	if err := fractions("buffer", buffer, ch.buffer, &ch.noBuffer); err != nil {
		return err
	}
	if err := fractions("overbooking", over, ch.over, &ch.noOver); err != nil {
		return err
	}
	for _, kv := range prios {
		k, v, ok := strings.Cut(kv, "=")
		if ok && v == "" && k != "" {
			if _, known := placement.DefaultPriorities[k]; !known {
				return badInput("--priority %q: unknown rule %q; want one of %s", kv, k, strings.Join(slices.Sorted(maps.Keys(placement.DefaultPriorities)), ", "))
			}
			ch.noPrio = append(ch.noPrio, k)
			continue
		}
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < math.MinInt32 || n > math.MaxInt32 {
			return badInput("--priority %q: want RULE=P with P one of -1, 0, 1, 2, or RULE= for the default", kv)
		}
		ch.prios[k] = int32(n)
	}
	// What the call sets must be valid on its own.
	local := placement.Settings{Buffer: ch.buffer, Overbooking: ch.over, Priorities: map[placement.Rule]placement.Priority{}}
	for k, v := range ch.prios {
		local.Priorities[k] = placement.Priority(v)
	}
	if err := local.Validate(); err != nil {
		return badInput("%v", err)
	}
	return nil
}

// apply returns cur with the change made; cur is not modified.
func (ch *settingsChange) apply(cur *pinfoldv1.PlacementSettings) *pinfoldv1.PlacementSettings {
	ps := &pinfoldv1.PlacementSettings{BufferPercent: map[string]float64{}, OverbookingPercent: map[string]float64{},
		ConstraintPriorities: map[string]int32{}, DownGraceSeconds: cur.DownGraceSeconds}
	if !ch.clear["buffer"] {
		maps.Copy(ps.BufferPercent, cur.BufferPercent)
	}
	if !ch.clear["overbooking"] {
		maps.Copy(ps.OverbookingPercent, cur.OverbookingPercent)
	}
	if !ch.clear["priority"] {
		maps.Copy(ps.ConstraintPriorities, cur.ConstraintPriorities)
	}
	for _, k := range ch.noBuffer {
		delete(ps.BufferPercent, k)
	}
	for _, k := range ch.noOver {
		delete(ps.OverbookingPercent, k)
	}
	for _, k := range ch.noPrio {
		delete(ps.ConstraintPriorities, k)
	}
	maps.Copy(ps.BufferPercent, ch.buffer)
	maps.Copy(ps.OverbookingPercent, ch.over)
	maps.Copy(ps.ConstraintPriorities, ch.prios)
	return ps
}

// validSettings checks the settings a change leads to; a resource that
// would end with a buffer and an overbooking says how to remove one.
func validSettings(ps *pinfoldv1.PlacementSettings) error {
	for _, r := range placement.Resources {
		b, hasB := ps.BufferPercent[r]
		o, hasO := ps.OverbookingPercent[r]
		if hasB && hasO {
			return badInput("%s would have a buffer (%g) and an overbooking (%g): a resource has one or the other, never both; remove one with --buffer %s= or --overbooking %s=",
				r, b, o, r, r)
		}
	}
	s := placement.Settings{Buffer: ps.BufferPercent, Overbooking: ps.OverbookingPercent, Priorities: map[placement.Rule]placement.Priority{}}
	for k, v := range ps.ConstraintPriorities {
		s.Priorities[k] = placement.Priority(v)
	}
	if err := s.Validate(); err != nil {
		return badInput("%v", err)
	}
	return nil
}

func orEmpty(m map[string]float64) map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	return m
}

func orEmptyPriorities(m map[string]int32) map[string]int32 {
	if m == nil {
		return map[string]int32{}
	}
	return m
}

package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/balance"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// moveJSON is one move of an instance between hosts.
type moveJSON struct {
	Instance    string `json:"instance"`
	Service     string `json:"service"`
	From        string `json:"from"`
	To          string `json:"to"`
	Why         string `json:"why,omitempty"`
	NewInstance string `json:"new_instance,omitempty"`
}

func movesJSON(ms []*pinfoldv1.Move) []moveJSON {
	out := []moveJSON{}
	for _, m := range ms {
		out = append(out, moveJSON{Instance: m.Instance, Service: m.Service, From: m.From, To: m.To, Why: m.Why, NewInstance: m.NewInstance})
	}
	return out
}

func newRebalanceCmd() *cobra.Command {
	var (
		c                   clientFlags
		out                 outputFlag
		apply, dryRun, frag bool
		moveLocal           bool
		maxMoves            int
		balancing, activity float64
	)
	cmd := &cobra.Command{
		Use:   "rebalance [--dry-run | --apply] [--defragment] [--max-moves N]",
		Short: "Propose (or start) moves that even out CPU and memory use and free shared CPUs",
		Long: `Propose a bounded list of moves that reduce imbalance between the hosts that
take work, resource by resource: a resource is balanced when the most used
host's share of it, divided by the least used host's share, exceeds the
balancing threshold, and only while the most used host's share is at least
the activity threshold (an idle cluster is left alone), except that a host
running nothing, a new one, is filled in any case. Each move must lower
the spread of the hosts' shares, and each is planned through the same
placement rules as a deploy, one after another, so no step breaks a
constraint, an affinity or a domain spread. --defragment adds moves of
instances that hold a fragment of one CPU when that leaves fewer CPUs shared
in pieces.

Without --apply nothing changes (a dry run, the default); every move says
why. --apply starts the moves blue-green: each new instance must run and pass
its health gate before its old instance is removed ('pinfold ps' shows them).

An instance with a host-local volume (--volume: a bind mount or a named
volume) is not moved: its data lives on its host; the output lists it as
kept, with why. --move-local-volumes lets it move, its volume left behind.`,
		Example: `  pinfold rebalance
  pinfold rebalance --defragment --max-moves 5 -o json
  pinfold rebalance --balancing-threshold 1.2 --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if apply && dryRun {
				return badInput("--apply and --dry-run: give one")
			}
			o := balance.Options{BalancingThreshold: balancing, ActivityThreshold: activity, MaxMoves: maxMoves}
			if err := o.Validate(); err != nil {
				return badInput("%v", err)
			}
			moves, err := int32Of("--max-moves", maxMoves, 0, balance.MaxMovesLimit)
			if err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Rebalance(cmd.Context(), connect.NewRequest(&pinfoldv1.RebalanceRequest{Apply: apply, MaxMoves: moves,
					BalancingThreshold: balancing, ActivityThreshold: activity, Defragment: frag, MoveLocalVolumes: moveLocal}))
				if err != nil {
					return err
				}
				m := resp.Msg
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), map[string]any{"applied": apply, "moves": movesJSON(m.Moves), "kept": movesJSON(m.Kept),
						"imbalance_before": ratiosJSON(m.ImbalanceBefore), "imbalance_after": ratiosJSON(m.ImbalanceAfter),
						"fragmented_cpus_before": m.FragmentedBefore, "fragmented_cpus_after": m.FragmentedAfter, "no_move": append([]string{}, m.NoMove...)})
				}
				w := cmd.OutOrStdout()
				for _, r := range balance.Resources {
					fmt.Fprintf(w, "%s: most/least used host %s → %s\n", r, ratioText(m.ImbalanceBefore[r]), ratioText(m.ImbalanceAfter[r]))
				}
				fmt.Fprintf(w, "CPUs shared in pieces: %d → %d\n", m.FragmentedBefore, m.FragmentedAfter)
				for _, k := range m.Kept {
					if k.Instance == "" { // a service placed per host: nothing moves it
						fmt.Fprintf(w, "kept: %s\n", k.Why)
						continue
					}
					fmt.Fprintf(w, "kept: %s (--move-local-volumes moves it)\n", k.Why)
				}
				if len(m.Moves) == 0 {
					fmt.Fprintln(w, "no move:")
					for _, why := range m.NoMove {
						fmt.Fprintf(w, "  %s\n", why)
					}
					return nil
				}
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				head := "#\tINSTANCE\tSERVICE\tFROM\tTO\tWHY"
				if apply {
					head += "\tNEW INSTANCE"
				}
				fmt.Fprintln(tw, head)
				for i, mv := range m.Moves {
					line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s", i+1, mv.Instance, mv.Service, mv.From, mv.To, mv.Why)
					if apply {
						line += "\t" + mv.NewInstance
					}
					fmt.Fprintln(tw, line)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if !apply {
					fmt.Fprintln(w, "dry run: nothing changed; --apply starts these moves")
				} else if int(m.Proposed) > len(m.Moves) {
					fmt.Fprintf(w, "started %d of the %d moves planned: the others no longer fit the hosts as they are now; run rebalance again\n", len(m.Moves), m.Proposed)
				}
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().BoolVar(&apply, "apply", false, "start the moves (blue-green, with health gates)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only propose (the default)")
	cmd.Flags().BoolVar(&frag, "defragment", false, "also move single-fragment instances when that frees CPUs shared in pieces")
	cmd.Flags().BoolVar(&moveLocal, "move-local-volumes", false, "also move instances with a host-local volume (bind mount or named volume); their data stays behind")
	cmd.Flags().IntVar(&maxMoves, "max-moves", 0, fmt.Sprintf("at most this many moves (0: %d)", balance.DefaultMaxMoves))
	cmd.Flags().Float64Var(&balancing, "balancing-threshold", 0, fmt.Sprintf("most/least used share above which a resource is balanced (0: %g)", balance.DefaultBalancing))
	cmd.Flags().Float64Var(&activity, "activity-threshold", 0, fmt.Sprintf("most used share below which nothing moves, 0..1 (0: %g)", balance.DefaultActivity))
	return cmd
}

// ratiosJSON keeps a ratio per resource; an infinite one (a host uses none
// of it) is null.
func ratiosJSON(m map[string]float64) map[string]any {
	out := map[string]any{}
	for _, r := range slices.Sorted(maps.Keys(m)) {
		if m[r] < 0 || math.IsInf(m[r], 0) {
			out[r] = nil
		} else {
			out[r] = m[r]
		}
	}
	return out
}

func ratioText(v float64) string {
	if v < 0 {
		return "∞ (an empty host: it uses none)"
	}
	return fmt.Sprintf("%.2f", v)
}

func newScaleCmd() *cobra.Command {
	var (
		c     clientFlags
		out   outputFlag
		count int
	)
	cmd := &cobra.Command{
		Use:   "scale SERVICE --count N",
		Short: "Set the number of a service's instances",
		Long: `Set how many instances a deployed service has. Missing instances are placed
like a deploy, with the service's image, size and placement rules; surplus
ones are removed worst placed first: those on hosts that are down, disabled
or in maintenance, then those on the host holding most of the service, then
those on the host using the largest share of its CPU. --count 0 keeps the
service's record (scale it up again later). --count is the service's total,
except for a service deployed with --strategy each or fill, where it is
per host, as its deploy's --count was: an 'each' service deployed with
--count 1 on 7 hosts has 7 instances, and scale --count 2 gives each host
the rules allow 2 (14 in all). When a host holding instances has fewer
than N, scale tops every host the rules allow up to N, all or nothing like
fill (a host the rules allow without room for them refuses it, naming
the host, and nothing changes; a host without room for even one more
gets none, and a WARNING names it), then removes any excess; when every host holding
instances has N or more, it only removes each host's excess, worst placed
first (scale --count 1 brings each back to 1). The count printed is the
service's total.`,
		Example: `  pinfold scale web --count 5
  pinfold scale web --count 0 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if !cmd.Flags().Changed("count") {
				return badInput("--count N is required")
			}
			n, err := int32Of("--count", count, 0, service.MaxDeployCount)
			if err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Scale(cmd.Context(), connect.NewRequest(&pinfoldv1.ScaleRequest{Service: args[0], Count: n}))
				if err != nil {
					return err
				}
				m := resp.Msg
				warnNoRoom(cmd.ErrOrStderr(), args[0], m.NoRoom)
				if m.CappedPerHost > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %s has max per host %d: --count %d per host is capped at %d\n", args[0], m.CappedPerHost, n, m.CappedPerHost)
				}
				if out.json() {
					added := []instanceJSON{}
					for _, in := range m.Added {
						added = append(added, toInstanceJSON(in))
					}
					preempted := []victimJSON{}
					for _, v := range m.Preempted {
						preempted = append(preempted, victimJSON{ID: v.Id, Service: v.Service, Host: v.Host, Priority: v.Priority})
					}
					removed := m.Removed
					if removed == nil {
						removed = []string{}
					}
					noRoom := m.NoRoom
					if noRoom == nil {
						noRoom = []string{}
					}
					return writeJSON(cmd.OutOrStdout(), map[string]any{"service": args[0], "count": m.Count, "added": added, "removed": removed,
						"no_room": noRoom, "capped_per_host": m.CappedPerHost, "preempted": preempted})
				}
				printVictims(cmd.ErrOrStderr(), "preempted", m.Preempted)
				for _, in := range m.Added {
					fmt.Fprintf(cmd.OutOrStdout(), "added %s on %s\n", in.Id, in.Host)
				}
				for _, id := range m.Removed {
					fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", id)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], instances(int(m.Count)))
				return nil
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, false, true, false)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().IntVar(&count, "count", 0, "the number of instances wanted (per host for a service of strategy each or fill)")
	return cmd
}

package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

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

A move uses the cluster's overbooking only when no host has room within its
nominal capacity for the instance; the drain then ends naming each host it
took past it ("placed on small using overbooking: memory 17 GiB/14.4 GiB"),
as its moves' events do ('pinfold events --host NAME').

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
				// The hosts above their nominal capacity before: the drain
				// names those it put there (or further past it).
				var before map[string]string
				if !cancel && !noWait && !out.json() {
					var err error
					if before, err = overbooked(cmd, cl); err != nil {
						return err
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
				return waitDrain(cmd, cl, name, out.json(), moveLocal, before)
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
// and the drain ended, then the host's state and the hosts it left above
// their nominal capacity (before: those above it when it began); without
// moveLocal it ends (exit 1) when only instances with a host-local volume
// are left.
func waitDrain(cmd *cobra.Command, cl pinfoldv1connect.PlannerServiceClient, name string, asJSON, moveLocal bool, before map[string]string) error {
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
				if !asJSON { // the moves made may have used the overbooking
					_ = printOverbooked(cmd, cl, name, before)
				}
				return &exitError{code: exitUnmet, err: fmt.Errorf("drain of %s is parked: %s; the planner tries again in the background ('pinfold host show %s'; 'pinfold host drain %s --cancel' stops it)", name, s, name, name)}
			}
		}
		if line != last && !asJSON {
			fmt.Fprintln(cmd.ErrOrStderr(), line)
			last = line
		}
		if local := hostLocal(resp.Msg.Instances); !moveLocal && left > 0 && len(local) == left && resp.Msg.Host.Draining {
			if !asJSON {
				_ = printOverbooked(cmd, cl, name, before)
			}
			return &exitError{code: exitUnmet, err: fmt.Errorf("drain of %s: %d instances stay, each with a host-local volume (%s); 'pinfold host drain %s --move-local-volumes' moves them (their data stays behind), '--cancel' ends the drain",
				name, left, strings.Join(local, ", "), name)}
		}
		if h := resp.Msg.Host; left == 0 && !h.Draining {
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toHostJSON(h))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "host %s drained: %s moved; it is %s\n", name, instances(total), h.State)
			return printOverbooked(cmd, cl, name, before)
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// overbooked is, per host above its nominal capacity, what it holds past
// it ("memory 15.5 GiB/14.4 GiB").
func overbooked(cmd *cobra.Command, cl pinfoldv1connect.PlannerServiceClient) (map[string]string, error) {
	hosts, err := allHosts(cmd.Context(), cl)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, h := range hosts {
		if len(h.OverNominal) > 0 {
			out[h.Name] = strings.Join(h.OverNominal, ", ")
		}
	}
	return out, nil
}

// printOverbooked says which hosts the drain of name left above their
// nominal capacity, or further past it, than before: no host had nominal
// room for what moved there, and the overbooking took it (the moves'
// events say which instance went where).
func printOverbooked(cmd *cobra.Command, cl pinfoldv1connect.PlannerServiceClient, name string, before map[string]string) error {
	if before == nil {
		return nil
	}
	after, err := overbooked(cmd, cl)
	if err != nil {
		return err
	}
	for _, h := range slices.Sorted(maps.Keys(after)) {
		if after[h] != before[h] {
			fmt.Fprintf(cmd.OutOrStdout(), "placed on %s using overbooking: %s (no host had nominal room; 'pinfold events --host %s' names the moves)\n", h, after[h], name)
		}
	}
	return nil
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

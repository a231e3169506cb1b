package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

func bindFlag(bind, unbind bool) (*bool, error) {
	switch {
	case bind && unbind:
		return nil, badInput("--bind and --no-bind exclude each other")
	case bind:
		return &bind, nil
	case unbind:
		f := false
		return &f, nil
	}
	return nil, nil
}

func newResizeCmd() *cobra.Command {
	var (
		c            clientFlags
		out          outputFlag
		cpu, memory  string
		bind, noBind bool
		force        bool
		noPreempt    bool
		dryRun       bool
		wait         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "resize (SERVICE|INSTANCE)",
		Short: "Change CPU and memory of running instances by deltas, in place",
		Long: `Resize by deltas (pass the difference, not the target): --cpu and --memory
take a sign, +0.5 to add half a CPU, -64MiB to take 64 MiB away. An amount
without a sign (--cpu 1) is refused as ambiguous, and so is a change that
comes to nothing: zero, or less than one piece of a CPU (0.01 CPU with the
default share base of 100). A change that is not a whole number of pieces
(+0.015) is refused with the nearest ones, never rounded. The instance
keeps its CPUs wherever possible; --bind/--no-bind switch between
CPU-bound and memory-first. For a service
every instance is resized, all or nothing; a service scaled to 0 has its
record resized, by the rules an instance's resize follows, and the
instances a scale adds get that size (-o json then prints an object with
the record's size, not an empty list).

Lowering memory below what an instance uses now is shrunk by its agent
guided by memory.pressure: it steps memory.high down while the container does
not stall, and sets memory.max once the use is at the target (page cache
goes; hot memory stays). If the container stalls, or the deadline passes
(the agent's --shrink-deadline), the old limits stay and the resize rolls
back with the reason.

The command waits (--wait) until every agent has applied the change. If a
host refuses it (Docker or the kernel says no), the planner rolls the
instance back to its previous allocation and the command fails with the
host's reason (exit 1).

An instance that does not grow on its own host stops the fewest
instances of strictly lower-priority services there, in the same commit
("preempted ID (service, priority) on HOST"; -o json: preempted on the
first instance of that host), unless --no-preempt. --dry-run plans the
resize and prints the instances at their new size and the instances it
would preempt ("would preempt ..."), changing nothing.`,
		Example: `  pinfold resize web-3f2a9c0d1e --cpu +0.7 --memory +64MiB
  pinfold resize web --cpu -0.5
  pinfold resize cache --no-bind
  pinfold resize db --memory -2GiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			req := &pinfoldv1.ResizeRequest{Target: args[0], NoPreempt: noPreempt, DryRun: dryRun}
			var err error
			if cpu != "" {
				if req.CpuDelta, err = parseCPUDelta(cpu); err != nil {
					return err
				}
			}
			if memory != "" {
				if req.MemoryDeltaBytes, err = parseMemoryDelta(memory); err != nil {
					return err
				}
			}
			if req.Bind, err = bindFlag(bind, noBind); err != nil {
				return err
			}
			if cpu == "" && memory == "" && req.Bind == nil {
				return badInput("nothing to change: give --cpu, --memory, --bind or --no-bind")
			}
			if wait < 0 {
				return badInput("--wait %s: want 0 (do not wait) or more", wait)
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				resp, err := cl.Resize(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				ins := resp.Msg.Instances
				if !out.json() {
					verb := "preempted"
					if resp.Msg.DryRun {
						verb = "would preempt"
					}
					for _, v := range resp.Msg.Preempted {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s %s (%s, priority %s) on %s\n", verb, v.Id, v.Service, model.Priority(v.Priority), v.Host)
					}
				}
				if resp.Msg.DryRun {
					// The plan alone: no host applies anything, and a
					// service at count 0 has no instance to show.
					if out.json() {
						return writeJSON(cmd.OutOrStdout(), deployJSON(&pinfoldv1.DeployResponse{Instances: ins, Preempted: resp.Msg.Preempted, DryRun: true}))
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "dry run: would resize %s, preempting %d; nothing was changed\n", instances(len(ins)), len(resp.Msg.Preempted))
					return printInstances(cmd.OutOrStdout(), ins)
				}
				var werr error
				if wait > 0 && len(ins) > 0 { // none: a service at count 0, its record alone changed
					var progress io.Writer
					if !out.json() {
						progress = cmd.ErrOrStderr()
						fmt.Fprintf(progress, "resized %s in the plan; waiting for their hosts…\n", instances(len(ins)))
					}
					if got, err := waitApplied(cmd.Context(), cl, generations(ins), waitResize, wait, progress); got != nil {
						ins, werr = got, err
					} else {
						werr = err
					}
				}
				switch {
				case out.json() && len(ins) == 0:
					if err := writeJSON(cmd.OutOrStdout(), resizedRecordJSON(cmd.Context(), cl, args[0])); err != nil {
						return err
					}
				case out.json():
					if err := writeJSON(cmd.OutOrStdout(), deployJSON(&pinfoldv1.DeployResponse{Instances: ins, Preempted: resp.Msg.Preempted})); err != nil {
						return err
					}
				case len(ins) == 0:
					size := "the new size"
					if r, err := cl.GetService(cmd.Context(), connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: args[0]})); err == nil {
						rec := r.Msg.GetService()
						mode := "memory-first"
						if rec.GetBind() {
							mode = "bound"
						}
						size = fmt.Sprintf("%s CPUs (%s) and %s", rec.GetCpu(), mode, alloc.FormatBytes(rec.GetMemoryBytes()))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "service %s has no instances: its record is now %s, which the instances a scale adds get\n", args[0], size)
				default:
					if err := printInstances(cmd.OutOrStdout(), ins); err != nil {
						return err
					}
				}
				return werr
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, false, true, true)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&cpu, "cpu", "", "CPU change, signed: +0.7 or -0.5 (whole pieces of a CPU, at least one)")
	cmd.Flags().StringVar(&memory, "memory", "", "memory change, signed: +64MiB or -1GiB")
	cmd.Flags().BoolVar(&bind, "bind", false, "switch to CPU-bound")
	cmd.Flags().BoolVar(&noBind, "no-bind", false, "switch to memory-first")
	cmd.Flags().BoolVar(&noPreempt, "no-preempt", false, "an instance that does not grow on its host fails the resize rather than stop instances of lower-priority services there")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "plan the resize and print the new sizes and the instances it would preempt; change nothing")
	cmd.Flags().BoolVar(&force, "force", false, "")
	_ = cmd.Flags().MarkDeprecated("force", "it is no longer needed: memory below current use is shrunk by the agent guided by memory.pressure, or rolled back")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "wait this long for the hosts to apply the change (0: return once planned)")
	return cmd
}

// resizedRecordJSON describes a resize of a service at count 0, which
// changed its record alone: an object with the record's size now (it
// printed [], as if nothing had changed).
func resizedRecordJSON(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, service string) map[string]any {
	v := map[string]any{"service": service, "count": 0, "instances": []instanceJSON{}}
	if r, err := cl.GetService(ctx, connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: service})); err == nil {
		rec := r.Msg.GetService()
		cpu := json.Number(rec.GetCpu())
		if _, err := cpu.Float64(); err != nil {
			cpu = "0"
		}
		v["record"] = map[string]any{"cpu": cpu, "bind": rec.GetBind(), "memory_bytes": rec.GetMemoryBytes()}
	}
	return v
}

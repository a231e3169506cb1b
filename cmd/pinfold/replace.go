package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

func newReplaceCmd() *cobra.Command {
	var (
		c      clientFlags
		out    outputFlag
		image  string
		batch  int
		wait   time.Duration
		health healthFlags
		pull   string
		ctr    containerFlags
	)
	cmd := &cobra.Command{
		Use:   "replace (SERVICE|INSTANCE) --image IMG [--pull missing|always] [-- COMMAND ARGS…]",
		Short: "Replace containers blue-green with a new image, on the same CPUs and memory",
		Long: `Record a new image (and optionally command) for an instance or a whole
service. No resources are planned: each host's agent pauses the old
container, starts the new one on the same allocation, and removes the old
one only after the new one is healthy; otherwise it removes the new one and
resumes the old. Every replaced instance gets new containers, also when the
image and command are unchanged (a restart, like kubectl rollout restart).
--pull always makes the host pull the image first (a re-pushed tag); the
default, missing, pulls only an image the host lacks.

Any of --volume, --restart, --label, --user, --workdir, --read-only,
--cap-add, --cap-drop, --log-driver, --log-opt replaces the container
settings as a whole (those not given are cleared: repeat the ones to
keep); with none of them each instance keeps its own.

Healthy means: the probe given here (--health-cmd, --health-tcp or
--health-http) passes within --health-timeout; else the image's own
HEALTHCHECK reports healthy; else the container keeps running for 3s.

A service is replaced host by host: --batch N hosts at a time (0: all at
once), each batch waited for before the next starts; the first failure
stops the rollout (exit 1) and leaves later hosts untouched. A service
scaled to 0 has its record changed: the instances a scale adds get it.`,
		Example: `  pinfold replace web --image nginx:1.27 --batch 1 --health-http 80/
  pinfold replace web-3f2a9c0d1e --image nginx:1.27 --health-cmd "test -f /run/ready"
  pinfold replace web --image nginx:1.27 --pull always   # restart on a re-pushed tag
  pinfold replace pg --image postgres:16 --volume pgdata:/var/lib/postgresql/data --restart always`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if image == "" {
				return badInput("--image is required")
			}
			if batch < 0 {
				return badInput("--batch %d: want 0 (all hosts at once) or more", batch)
			}
			if pull != "missing" && pull != "always" {
				return badInput("--pull %q: want missing or always", pull)
			}
			if wait < 0 {
				return badInput("--wait %s: want 0 (do not wait) or more", wait)
			}
			hc, err := health.msg()
			if err != nil {
				return err
			}
			var cs *pinfoldv1.ContainerSpec
			if ctr.given(cmd) {
				if cs, err = ctr.msg(); err != nil {
					return err
				}
				if cs == nil {
					cs = &pinfoldv1.ContainerSpec{} // every setting cleared
				}
			}
			var command []string
			if len(args) > 1 {
				command = args[1:]
			}
			var progress io.Writer
			if !out.json() {
				progress = cmd.ErrOrStderr()
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				ctx := cmd.Context()
				cur, err := allInstances(ctx, cl, "", args[0])
				if err != nil {
					return err
				}
				groups := [][]string{nil} // an instance, or all hosts at once
				if len(cur) > 0 && batch > 0 {
					groups = batches(cur, batch)
				}
				var all []*pinfoldv1.Instance
				for i, hosts := range groups {
					resp, err := cl.Replace(ctx, connect.NewRequest(&pinfoldv1.ReplaceRequest{Target: args[0], Image: image, Command: command,
						Health: hc, Hosts: hosts, Pull: pull, Container: cs}))
					if err != nil {
						return err
					}
					ins := resp.Msg.Instances
					if len(ins) == 0 { // a service at count 0: its record alone changed
						continue
					}
					if progress != nil {
						where := "their hosts"
						if hosts != nil {
							where = strings.Join(hosts, ", ")
						}
						fmt.Fprintf(progress, "batch %d/%d: replacing %s on %s with %s…\n", i+1, len(groups), instances(len(ins)), where, image)
					}
					if wait > 0 {
						t0 := time.Now()
						got, err := waitApplied(ctx, cl, generations(ins), waitReplace, wait, progress)
						if got != nil {
							ins = got
						}
						if err != nil {
							all = append(all, ins...)
							if progress != nil && i+1 < len(groups) {
								fmt.Fprintf(progress, "stopped: %d later batches not started\n", len(groups)-i-1)
							}
							_ = showInstances(cmd, out, all)
							return err
						}
						if progress != nil {
							fmt.Fprintf(progress, "batch %d/%d done in %s\n", i+1, len(groups), time.Since(t0).Round(time.Millisecond))
						}
					}
					all = append(all, ins...)
				}
				if len(all) == 0 && !out.json() {
					fmt.Fprintf(cmd.OutOrStdout(), "service %s has no instances: its record has image %s, which the instances a scale adds get\n", args[0], image)
					return nil
				}
				return showInstances(cmd, out, all)
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, false, true, true)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&image, "image", "", "the new image")
	cmd.Flags().IntVar(&batch, "batch", 0, "hosts replaced at a time for a service (0: all at once)")
	cmd.Flags().StringVar(&pull, "pull", "missing", "when hosts pull the image: missing (only when they lack it) or always")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for each batch (0: return once recorded)")
	health.register(cmd)
	ctr.register(cmd)
	return cmd
}

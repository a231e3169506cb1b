package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/model"
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
		rm     editFlags
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "replace (SERVICE|INSTANCE) [--image IMG] [--pull missing|always] [--dry-run] [-- COMMAND ARGS…]",
		Short: "Replace containers blue-green with a new image, on the same CPUs and memory",
		Long: `Record a new image (and optionally command) for an instance or a whole
service; without --image each instance keeps its own (replace pg
--restart always changes the restart policy alone). No resources are planned: each host's agent pauses the old
container, starts the new one on the same allocation, and removes the old
one only after the new one is healthy; otherwise it removes the new one and
resumes the old. Every replaced instance gets new containers, also when the
image and command are unchanged (a restart, like kubectl rollout restart).
--pull always makes the host pull the image first (a re-pushed tag); the
default, missing, pulls only an image the host lacks.

Only what a flag names changes; every other setting keeps each instance's
own value (and the record's). --volume mounts a volume (replacing the one
at its container path), --label and --log-opt set a key, --cap-add and
--cap-drop add a capability to their list, --restart, --user, --workdir,
--read-only and --log-driver set theirs (--restart no, --user "",
--workdir "", --log-driver "", --read-only=false put the default back).
A setting goes only when named: --volume-rm PATH (a container path, or
SOURCE:TARGET), --label-rm KEY, --log-opt-rm KEY, --cap-add-rm CAP,
--cap-drop-rm CAP. Environment, network and ports are not a replace's: a
deploy sets them, and a replace keeps them. --dry-run lists, setting by
setting, what would change in the record and in each instance (old →
new), and changes nothing; a replace prints the same list for the record
before it starts.

Healthy means: the probe given here (--health-cmd, --health-tcp or
--health-http) passes within --health-timeout; else the image's own
HEALTHCHECK reports healthy; else the container keeps running for 3s.

A service is replaced host by host: --batch N hosts at a time (0: all at
once), each batch waited for before the next starts; the first failure
stops the rollout (exit 1) and leaves later hosts untouched. A service
scaled to 0 has its record changed: the instances a scale adds get it
(-o json then describes that change: an object, not a list).`,
		Example: `  pinfold replace web --image nginx:1.27 --batch 1 --health-http 80/
  pinfold replace web-3f2a9c0d1e --image nginx:1.27 --health-cmd "test -f /run/ready"
  pinfold replace web --image nginx:1.27 --pull always   # restart on a re-pushed tag
  pinfold replace pg --image postgres:16 --restart always   # its volumes stay
  pinfold replace pg --image postgres:16 --volume-rm /scratch --dry-run`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			req, err := replaceRequest(cmd, args, image, pull, batch, wait, &health, &ctr, rm)
			if err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				changes, err := replaceChanges(cmd.Context(), cl, req)
				if err != nil {
					return err
				}
				if dryRun {
					if changes.record == nil && len(changes.instances) == 0 {
						return connect.NewError(connect.CodeNotFound, fmt.Errorf("no instance or service named %q", req.Target))
					}
					return showReplaceChanges(cmd, out, changes, true)
				}
				if !out.json() && changes.record != nil {
					_ = showReplaceChanges(cmd, out, changes, false)
				}
				return runReplace(cmd, cl, out, req, batch, wait, changes)
			})
		},
	}
	cmd.ValidArgsFunction = completeNames(&c, false, true, true)
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVar(&image, "image", "", "the new image (not given: each instance keeps its own)")
	cmd.Flags().IntVar(&batch, "batch", 0, "hosts replaced at a time for a service (0: all at once)")
	cmd.Flags().StringVar(&pull, "pull", "missing", "when hosts pull the image: missing (only when they lack it) or always")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for each batch (0: return once recorded)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would change, setting by setting, and change nothing")
	health.register(cmd)
	ctr.register(cmd)
	rm.register(cmd)
	return cmd
}

// replaceRequest is the request replace's flags make, checked (bad input,
// exit 2, before any call).
func replaceRequest(cmd *cobra.Command, args []string, image, pull string, batch int, wait time.Duration, health *healthFlags, ctr *containerFlags, rm editFlags) (*pinfoldv1.ReplaceRequest, error) {
	switch {
	case batch < 0:
		return nil, badInput("--batch %d: want 0 (all hosts at once) or more", batch)
	case pull != "missing" && pull != "always":
		return nil, badInput("--pull %q: want missing or always", pull)
	case wait < 0:
		return nil, badInput("--wait %s: want 0 (do not wait) or more", wait)
	}
	hc, err := health.msg()
	if err != nil {
		return nil, err
	}
	edit, err := ctr.edit(cmd, rm)
	if err != nil {
		return nil, err
	}
	var command []string
	if len(args) > 1 {
		command = args[1:]
	}
	return &pinfoldv1.ReplaceRequest{Target: args[0], Image: image, Command: command, Health: hc, Pull: pull,
		Edit: pinfoldv1.NewContainerEdit(edit)}, nil
}

// replaceTarget is one record or instance a replace changes, and how.
type replaceTarget struct {
	ID      string   `json:"id"`
	Host    string   `json:"host,omitempty"`
	Changes []string `json:"changes"`
}

// replacePlan is what a replace would change: the service's record (nil
// for an instance target) and each instance.
type replacePlan struct {
	service   string
	record    *replaceTarget
	instances []replaceTarget
	current   []*pinfoldv1.Instance // the service's instances as read
}

// replaceChanges reads the target and lists, setting by setting, what req
// changes in it: the merge the planner makes (model.Spec.Patched).
func replaceChanges(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, req *pinfoldv1.ReplaceRequest) (replacePlan, error) {
	patch := model.SpecPatch{Image: req.Image, Command: req.Command, Health: req.Health.Model(), Pull: req.Pull, Edit: req.Edit.Model()}
	if patch.Pull == "missing" {
		patch.Pull = model.PullMissing
	}
	var plan replacePlan
	r, err := cl.GetService(ctx, connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: req.Target}))
	switch {
	case err == nil:
		plan.service = req.Target
		spec := r.Msg.GetService().Model(0).Spec
		plan.record = &replaceTarget{ID: req.Target, Changes: nonNil(model.SpecChanges(spec, spec.Patched(patch)))}
		if plan.current, err = allInstances(ctx, cl, "", req.Target); err != nil {
			return plan, err
		}
	case connect.CodeOf(err) == connect.CodeNotFound || connect.CodeOf(err) == connect.CodeInvalidArgument: // an instance
		// An instance's ID is its service's name, "-" and a suffix: read
		// that service's instances, not the fleet's (the attack review
		// of issue 38: a dry run of one instance listed every instance).
		svc, _, ok := cutLast(req.Target, "-")
		if !ok {
			return plan, badInput("no instance or service named %q", req.Target)
		}
		all, err := allInstances(ctx, cl, "", svc)
		if err != nil {
			return plan, err
		}
		for _, in := range all {
			if in.Id == req.Target {
				plan.current = append(plan.current, in)
			}
		}
	default:
		return plan, err
	}
	// The planner's checks of the merge, made here too, so that a dry
	// run answers what the replace would (the attack review of issue 38:
	// a dry run listed 30 labels added where the replace was refused
	// past 128): a removal that matches nothing, a merged container past
	// a limit.
	var cs []model.Container
	for _, in := range plan.current {
		cs = append(cs, in.Model().Spec.Container)
	}
	if len(cs) == 0 && plan.service != "" {
		cs = append(cs, r.Msg.GetService().Model(0).Spec.Container)
	}
	if none := patch.Edit.Unmatched(cs); len(none) > 0 {
		return plan, badInput("%s: %s has no such setting to remove (nothing was changed)", strings.Join(none, ", "), req.Target)
	}
	for _, in := range plan.current {
		spec := in.Model().Spec
		next := spec.Patched(patch)
		if err := next.Container.Validate(); err != nil {
			return plan, badInput("instance %s: its container settings after this replace: %v", in.Id, err)
		}
		plan.instances = append(plan.instances, replaceTarget{ID: in.Id, Host: in.Host, Changes: nonNil(model.SpecChanges(spec, next))})
	}
	return plan, nil
}

// cutLast is s cut around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// showReplaceChanges prints plan: the record's changes, then each
// instance's where they differ from the record's (all of them for a dry
// run as JSON).
func showReplaceChanges(cmd *cobra.Command, out outputFlag, plan replacePlan, dry bool) error {
	if out.json() {
		v := map[string]any{"dry_run": dry, "instances": nonNilTargets(plan.instances)}
		if plan.record != nil {
			v["service"], v["record"] = plan.service, plan.record.Changes
		}
		return writeJSON(cmd.OutOrStdout(), v)
	}
	w := cmd.OutOrStdout()
	if !dry {
		w = cmd.ErrOrStderr()
	}
	same := 0
	if plan.record != nil {
		fmt.Fprintf(w, "service %s record: %s\n", plan.service, changeLine(plan.record.Changes))
	}
	for _, t := range plan.instances {
		if plan.record != nil && slices.Equal(t.Changes, plan.record.Changes) {
			same++
			continue
		}
		fmt.Fprintf(w, "instance %s on %s: %s\n", t.ID, t.Host, changeLine(t.Changes))
	}
	if same > 0 {
		fmt.Fprintf(w, "%s as the record\n", instances(same))
	}
	if dry {
		fmt.Fprintln(w, "dry run: nothing changed")
	}
	return nil
}

func nonNilTargets(t []replaceTarget) []replaceTarget {
	if t == nil {
		return []replaceTarget{}
	}
	return t
}

// changeLine is changes on one line; none says the replace only restarts.
func changeLine(changes []string) string {
	if len(changes) == 0 {
		return "no setting changes (new containers, the same settings)"
	}
	return strings.Join(changes, ", ")
}

// runReplace sends req host batch by host batch, waiting for each, and
// shows the replaced instances (or, at count 0, the record's change).
func runReplace(cmd *cobra.Command, cl pinfoldv1connect.PlannerServiceClient, out outputFlag, req *pinfoldv1.ReplaceRequest, batch int, wait time.Duration, plan replacePlan) error {
	ctx := cmd.Context()
	var progress io.Writer
	if !out.json() {
		progress = cmd.ErrOrStderr()
	}
	groups := [][]string{nil} // an instance, or all hosts at once
	if plan.record != nil && len(plan.current) > 0 && batch > 0 {
		groups = batches(plan.current, batch)
	}
	var all []*pinfoldv1.Instance
	for i, hosts := range groups {
		r := proto.CloneOf(req)
		r.Hosts = hosts
		resp, err := cl.Replace(ctx, connect.NewRequest(r))
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
			fmt.Fprintf(progress, "batch %d/%d: replacing %s on %s with %s…\n", i+1, len(groups), instances(len(ins)), where, req.Image)
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
	if len(all) == 0 && plan.record != nil {
		return showRecordOnly(cmd, cl, out, plan.service, req.Image, plan.record.Changes)
	}
	return showInstances(cmd, out, all)
}

// showRecordOnly reports a replace of a service at count 0: its record
// alone changed (-o json: an object saying so, with the changes and the
// record's spec now, not an empty list).
func showRecordOnly(cmd *cobra.Command, cl pinfoldv1connect.PlannerServiceClient, out outputFlag, service, image string, changes []string) error {
	if !out.json() {
		fmt.Fprintf(cmd.OutOrStdout(), "service %s has no instances: its record has image %s, which the instances a scale adds get\n", service, image)
		return nil
	}
	v := map[string]any{"service": service, "count": 0, "instances": []instanceJSON{}, "changes": changes}
	if r, err := cl.GetService(cmd.Context(), connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: service})); err == nil {
		sp := r.Msg.GetService().Model(0).Spec
		v["record"] = map[string]any{"image": sp.Image, "command": nonNil(sp.Command), "pull": orMissing(sp.Pull), "container": sp.Container}
	}
	return writeJSON(cmd.OutOrStdout(), v)
}

func orMissing(pull string) string {
	if pull == "" {
		return "missing"
	}
	return pull
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/servicesfile"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// diffServices compares the file's services with the planner's
// (servicesfile.Compare), once each is checked as the planner would check
// it.
func diffServices(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, want []servicesfile.Service, project string, prune bool) (servicesfile.Diff, error) {
	ins, err := allInstances(ctx, cl, "", "")
	if err != nil {
		return servicesfile.Diff{}, err
	}
	// Every service as the planner would check it, before any step is
	// made: a deploy the planner refused halfway through the file would
	// leave the steps before it made.
	sb, err := shareBaseOf(ctx, cl, ins)
	if err != nil {
		return servicesfile.Diff{}, err
	}
	if err := checkWithPlanner(want, sb); err != nil {
		return servicesfile.Diff{}, err
	}
	records := map[string]*pinfoldv1.ServiceRecord{}
	for _, w := range want {
		resp, err := cl.GetService(ctx, connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: w.Deploy.Service}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			continue
		}
		if err != nil {
			return servicesfile.Diff{}, err
		}
		records[w.Deploy.Service] = resp.Msg.Service
	}
	// Another project's service of the same name is refused before any
	// step: the whole file, so that apply changes nothing of either.
	if err := servicesfile.Foreign(want, records, project); err != nil {
		return servicesfile.Diff{}, &exitError{code: exitBadInput, err: fmt.Errorf("%w (nothing was changed)", err)}
	}
	// The sources are read without --prune too: diff says of each service
	// left alone what --prune would do with it.
	p := servicesfile.Prune{On: prune, Project: project}
	if p.Sources, err = pruneSources(ctx, cl, want, ins); err != nil {
		return servicesfile.Diff{}, err
	}
	return servicesfile.Compare(want, records, ins, p), nil
}

// pruneSources is the source (the project that applied it, "" by hand) of
// each service the planner runs and want does not have: --prune removes
// only the file's project's, and diff says so of each.
func pruneSources(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, want []servicesfile.Service, ins []*pinfoldv1.Instance) (map[string]string, error) {
	inFile := map[string]bool{}
	for _, w := range want {
		inFile[w.Deploy.Service] = true
	}
	out := map[string]string{}
	for _, in := range ins {
		if _, seen := out[in.Service]; seen || inFile[in.Service] {
			continue
		}
		resp, err := cl.GetService(ctx, connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: in.Service}))
		switch {
		case connect.CodeOf(err) == connect.CodeNotFound:
			out[in.Service] = "" // removed meanwhile: nothing to prune
		case err != nil:
			return nil, err
		default:
			out[in.Service] = resp.Msg.Service.GetSource()
		}
	}
	return out, nil
}

// maxPruneUnasked is how many instances apply --prune removes without
// --yes.
const maxPruneUnasked = 10

// pruneAsked refuses a prune of more than maxPruneUnasked instances
// without yes, naming what it would remove (nothing is changed).
func pruneAsked(d servicesfile.Diff, yes bool) error {
	n, services := 0, []string{}
	for _, s := range d.Steps {
		if s.Action == "remove" {
			n += s.Removes
			services = append(services, s.Service)
		}
	}
	if n <= maxPruneUnasked || yes {
		return nil
	}
	return &exitError{code: exitUnmet, err: fmt.Errorf("nothing was changed: --prune would remove %d instances of %s (%s): more than %d, add --yes to remove them ('pinfold diff --prune' lists them)",
		n, counted(len(services), "service"), strings.Join(services, ", "), maxPruneUnasked)}
}

// shareBaseOf is the planner's share base as its instances or, with none,
// its first host show it (0: no host is registered, the planner checks
// the amounts itself).
func shareBaseOf(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, ins []*pinfoldv1.Instance) (int, error) {
	for _, in := range ins {
		if in.ShareBase > 0 {
			return int(in.ShareBase), nil
		}
	}
	resp, err := cl.ListHosts(ctx, connect.NewRequest(&pinfoldv1.ListHostsRequest{PageSize: 1}))
	if err != nil {
		return 0, err
	}
	if len(resp.Msg.Hosts) == 0 {
		return 0, nil
	}
	return int(resp.Msg.Hosts[0].ShareBase), nil
}

// readServicesFile reads -f (- is standard input): the services, the
// file's project (servicesfile.Project, else defaultProject), which each
// deploy records as its source, and the reader's notes (a compose file's
// ignored keys), returned for the -o json document and, for the text
// output, printed on stderr at once: a refusal further on still comes
// after them. With prune, standard input must name its project: it has
// no directory, and every file piped in would share the default one.
func readServicesFile(cmd *cobra.Command, path string, out outputFlag, prune bool) (want []servicesfile.Service, project string, notes []string, err error) {
	if path == "" {
		return nil, "", nil, badInput("-f FILE is required: a services file (YAML or JSON) or a docker compose file")
	}
	var data []byte
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), servicesfile.MaxBytes+1))
	} else {
		// Bounded whatever the file is (/dev/zero has no size to check).
		var f *os.File
		if f, err = os.Open(path); err == nil {
			data, err = io.ReadAll(io.LimitReader(f, servicesfile.MaxBytes+1))
			f.Close()
		}
	}
	if err != nil {
		return nil, "", nil, badInput("-f %q: %v", path, err)
	}
	want, notes, err = servicesfile.Decode(data)
	if err != nil {
		return nil, "", nil, &exitError{code: exitBadInput, err: fmt.Errorf("%s: %w (nothing was changed)", path, err)}
	}
	project, compose, err := servicesfile.Project(data)
	if err != nil {
		return nil, "", nil, &exitError{code: exitBadInput, err: fmt.Errorf("%s: %w (nothing was changed)", path, err)}
	}
	if project == "" && prune && path == "-" {
		key := "project: NAME"
		if compose {
			key = "name: NAME"
		}
		return nil, "", nil, badInput("-f -: --prune needs the project named in the file (%s at the top): standard input has no directory to name it, and --prune removes the project's services that the file does not have (nothing was changed)", key)
	}
	if project == "" {
		project = defaultProject(path)
	}
	if !out.json() {
		for _, n := range notes {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", n)
		}
	}
	for i := range want {
		want[i].File = path
		want[i].Deploy.Source = project
	}
	return want, project, notes, nil
}

// defaultProject is the project of a file that names none: its
// directory's name (as docker compose names a project: every services.yaml
// would otherwise share the project services, and one's --prune remove
// another's services), "stdin" for standard input (readServicesFile
// refuses its --prune); lower-cased, with what a source may not hold
// left out.
func defaultProject(path string) string {
	name := "stdin"
	if path != "-" {
		abs, _ := filepath.Abs(path)
		name = filepath.Base(filepath.Dir(abs))
	}
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return -1
	}, strings.ToLower(name))
	if name == "" {
		name = "default"
	}
	return name[:min(len(name), model.MaxSourceLength)]
}

// withFileNotes is d with the file's notes before its own, for the -o
// json document (the text output printed them when the file was read).
func withFileNotes(d servicesfile.Diff, notes []string) servicesfile.Diff {
	d.Notes = append(append([]string{}, notes...), d.Notes...)
	return d
}

func printDiff(cmd *cobra.Command, d servicesfile.Diff, applied bool) {
	w := cmd.OutOrStdout()
	for _, s := range d.Steps {
		fmt.Fprintf(w, "%-8s %s: %s\n", s.Action, s.Service, s.Detail)
	}
	for _, n := range d.Unchanged {
		fmt.Fprintf(w, "%-8s %s\n", "same", n)
	}
	for _, n := range d.LeftAlone {
		fmt.Fprintf(w, "%-8s %s: not in the file, left alone: %s\n", "keep", n, d.LeftAloneWhy[n])
	}
	for _, n := range d.Notes {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", n)
	}
	switch {
	case len(d.Steps) == 0:
		fmt.Fprintln(w, "no changes: the planner's services match the file")
	case applied:
		fmt.Fprintf(w, "applied %s\n", counted(len(d.Steps), "change"))
	}
}

const applyFileHelp = `A services file is YAML or JSON with a services map; each service takes
what pinfold deploy takes:

  services:
    web:
      image: nginx:1.27          # required
      command: [nginx, -g, "daemon off;"]   # or one string
      env: [MODE=prod]           # or a map
      network: bridge
      health: {http: 80/, timeout: 30s}     # or cmd: "...", or tcp: 80
      pull: missing              # or always
      cpu: 1.5                   # default 1; whole pieces of a CPU
      bind: true
      whole_cores: false
      memory: 512MiB             # required
      memory_soft: 256MiB
      count: 3                   # default 1 (per host for each and fill)
      strategy: auto             # and max_per_host, priority (deploy's
                                 # --priority), and the rules: constraint,
      constraint: 'disk == "ssd"'  # affinity, soft_affinity, anti_affinity,
                                 # soft_anti_affinity, placement_policy,
                                 # hosts_order, domain_spread, use_buffer
      ports: [http=8080, admin]  # as deploy --port: static or dynamic
      volumes: [/srv/data:/data] # and restart, labels, user, workdir,
                                 # read_only, cap_add, cap_drop,
                                 # log_driver, log_opts (deploy's flags)

An unknown key or a bad value is an error naming its path
(services.web.cpu), and nothing is changed when any service is invalid.
The file is read as YAML 1.1: a plain y, yes, on, n, no or off is a bool,
so such a key (a service named no) is refused: quote it ("no"). cpu is a
whole number of pieces of a CPU (0.51, not 0.505, at 1/100).

A docker compose file is read too (a services map whose entries have
compose keys such as environment or deploy): image, command, entrypoint,
environment, network_mode, pull_policy, healthcheck, deploy.replicas
(or scale, the same count), deploy.resources.limits.cpus and .memory,
deploy.resources.reservations.memory (soft memory),
cpus/mem_limit/mem_reservation (given with the deploy key too: the same
value, or refused), ports (TCP: "8080:80" is the static
host port p80=8080:80, "80" a dynamic one named p80), volumes (absolute
host paths and named volumes; a path relative to the file, ./data:/data,
is refused: pinfold has no project directory on the hosts), restart or
deploy.restart_policy, user, read_only, cap_add, cap_drop, working_dir,
labels and logging (driver, options); deploy.mode global is strategy
each (one per host), deploy.placement.constraints on node.labels.KEY
(a host property) and node.hostname are the constraint, and
max_replicas_per_node is max_per_host. pinfold's own strategy,
max_per_host and priority are x-pinfold-strategy, x-pinfold-max-per-host
and x-pinfold-priority. privileged: true, devices, pid, ipc: host,
userns_mode, security_opt, cap_add: [ALL] and
deploy.resources.reservations.devices and .generic_resources (GPUs) are
refused: pinfold cannot honour them; so is env_file (move the variables
under environment:). Every other key (pids_limit and
deploy.resources.limits.pids: pinfold sets no PID limit;
deploy.resources.reservations.cpus, a hint), and a port or volume pinfold
has no form for (a host address, UDP, a range, an anonymous volume), is
named as ignored, per service (a note on stderr, in "notes" with -o json).
Compose services are memory-first (no bind); a compose variable (${...})
is refused: pinfold does not fill them in ($$ is a literal $).
Top-level x- keys (in either kind of file) are not read: they hold YAML
anchors (<<: *defaults).

Compared with the planner (GetService, ListInstances), each service is:
  deploy    new: placed with its size and rules
  resize    cpu, memory or bind differ: resized in place by the difference
            (an instance of another size than its service, resized on its
            own or deployed at another size: that instance first)
  replace   image, command, health check, pull or the container settings
            (volumes, restart, ...) differ, the service's or an instance's
            own (replace INSTANCE --cap-add ...): blue-green replace
  scale     count differs (for each and fill, per host: a host holding
            instances holds another number than count, or none runs);
            a scale down comes before the service's resize and replace
  recreate  what no live change makes: env, network, whole_cores, a soft
            memory a resize does not leave, a removed command or health
            check, ports, the priority, or a rule (strategy, max_per_host, constraint,
            affinities, placement_policy, hosts_order, domain_spread):
            needs remove + deploy; apply refuses (exit 1, nothing changed)
            unless --recreate
  remove    in the planner, not in the file, applied by the file's project:
            only with --prune (more than 10 instances: with --yes); without
            it the service is left alone and said so
use_buffer is used when a service is deployed and not compared.

Each service apply deploys records the file's project (a services file's
top-level project:, a compose file's name:, as compose spells one:
lower-case letters, digits, - and _, starting with a letter or digit; an
empty name is refused; else the file's directory's
name, as docker compose names a project, and "stdin" for -f -, whose
--prune is refused without one): --prune
removes only that project's services, never another project's or one
deployed by hand (diff names each service it leaves alone, whose it is
and what --prune does with it). A
service of the file the planner holds for another project is refused
(exit 2, the whole file, before any change: "services.db: of project
wp, not other"): rename it in the file, or remove it first; one deployed
by hand is applied as the file has it.`

func newDiffCmd() *cobra.Command {
	var (
		c     clientFlags
		out   outputFlag
		file  string
		prune bool
	)
	cmd := &cobra.Command{
		Use:   "diff -f FILE [--prune]",
		Short: "Show what 'pinfold apply' would change to match a services file",
		Long: `Compare a services file (or a docker compose file) with the planner's
services and print, per service, what apply would do. Nothing is changed.

Exit code, like diff(1): 0 no changes, 1 changes, 2 bad input: every
service is checked as apply checks it, as the planner checks a deploy of
it, and a bad value is named by its key (3 and 4 as for every command:
the planner unreachable, the outcome unknown).

` + applyFileHelp,
		Example: `  pinfold diff -f services.yaml
  pinfold diff -f compose.yaml --prune -o json
  pinfold diff -f services.yaml && echo "in sync"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			want, project, notes, err := readServicesFile(cmd, file, out, prune)
			if err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				d, err := diffServices(cmd.Context(), cl, want, project, prune)
				if err != nil {
					return err
				}
				if out.json() {
					if err := writeJSON(cmd.OutOrStdout(), withFileNotes(d, notes)); err != nil {
						return err
					}
				} else {
					printDiff(cmd, d, false)
				}
				if len(d.Steps) > 0 {
					return &exitError{code: exitUnmet, err: fmt.Errorf("%s to apply", counted(len(d.Steps), "change"))}
				}
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the services file (YAML or JSON, or a docker compose file; - for standard input)")
	cmd.Flags().BoolVar(&prune, "prune", false, "also remove the services of the file's project (project: or compose name:, else the file's directory) that it no longer has")
	return cmd
}

func newApplyCmd() *cobra.Command {
	var (
		c        clientFlags
		out      outputFlag
		file     string
		prune    bool
		recreate bool
		yes      bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--prune] [--recreate]",
		Short: "Make the planner's services match a services file",
		Long: `Bring the planner's services to a services file (or a docker compose file)
with the operations the other commands use: remove (--prune), then per
service a scale down, resize, replace, a scale up, then deploy, services
by name (a service after the new ones its hard affinity names). A second apply of the same file changes
nothing and says so. 'pinfold diff' shows the same list without changing
anything.

Every service is checked as the planner checks a deploy of it (health,
ports, sizes, names, rules) before anything is changed: a bad value is
exit 2, naming its key (services.web.health.http) and value, and nothing
is changed. A step the planner still refuses (capacity, a change made by
someone else) stops apply there: before any change, with the refusal's
exit code (1, or 2 for a name or value) and "nothing was changed"; after
one, with exit 1 naming the steps made, and a second apply continues
from where the cluster is. Apply records the changes and does not wait
for the hosts: watch them with 'pinfold ps'.

Exit code: 0 applied (or no changes), 1 not applied (a recreate without
--recreate, or a step refused: what was changed is named), 2 bad input,
nothing changed (3 and 4 as for every command). With -o json, stdout has
one document: the changes (as diff prints them), "applied" (the steps
made) and, when apply stopped, "refused" (each step not made, and why;
a file refused before any step, exit 2, is one entry of action
"check" with no changes).

` + applyFileHelp,
		Example: `  pinfold apply -f services.yaml
  pinfold apply -f compose.yaml --prune
  pinfold apply -f services.yaml --recreate -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			want, project, notes, err := readServicesFile(cmd, file, out, prune)
			if err != nil {
				return refusedFile(cmd, out, nil, err)
			}
			pulls := map[string]string{}
			for _, w := range want {
				pulls[w.Deploy.Service] = w.Pull
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				ctx := cmd.Context()
				d, err := diffServices(ctx, cl, want, project, prune)
				if err != nil {
					return refusedFile(cmd, out, notes, err)
				}
				var blocked []string
				for _, s := range d.Steps {
					if s.Action == "recreate" && !recreate {
						blocked = append(blocked, s.Service+": "+s.Detail)
					}
				}
				doc := applyJSON{Diff: withFileNotes(d, notes), Applied: []string{}}
				if err := pruneAsked(d, yes); err != nil {
					doc.Refused = []refusedStepJSON{{Action: "remove", Error: err.Error()}}
					return jsonThen(cmd, out, doc, err)
				}
				if len(blocked) > 0 {
					for _, s := range d.Steps {
						if s.Action == "recreate" {
							doc.Refused = append(doc.Refused, refusedStepJSON{Action: s.Action, Service: s.Service, Error: "needs --recreate: " + s.Detail})
						}
					}
					return jsonThen(cmd, out, doc, &exitError{code: exitUnmet, err: fmt.Errorf("nothing was changed: %s", strings.Join(blocked, "\n  "))})
				}
				for _, s := range d.Steps {
					victims, err := applyStep(ctx, cl, s, pulls[s.Service])
					for _, v := range victims {
						doc.Preempted = append(doc.Preempted, victimJSON{ID: v.Id, Service: v.Service, Host: v.Host, Priority: v.Priority})
					}
					if !out.json() {
						printVictims(cmd.ErrOrStderr(), "preempted", victims)
					}
					if err != nil {
						err = stepFailed(s, err, doc.Applied)
						doc.Refused = []refusedStepJSON{{Action: s.Action, Service: s.Service, Error: err.Error()}}
						return jsonThen(cmd, out, doc, err)
					}
					doc.Applied = append(doc.Applied, s.Action+" "+s.Service)
					if !out.json() {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: done\n", s.Action, s.Service)
					}
				}
				warnUnenforced(ctx, cl, cmd.ErrOrStderr(), placedHosts(ctx, cl, d.Steps))
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), doc)
				}
				printDiff(cmd, d, true)
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the services file (YAML or JSON, or a docker compose file; - for standard input)")
	cmd.Flags().BoolVar(&prune, "prune", false, "also remove the services of the file's project (project: or compose name:, else the file's directory) that it no longer has")
	cmd.Flags().BoolVar(&yes, "yes", false, fmt.Sprintf("with --prune: remove more than %d instances", maxPruneUnasked))
	cmd.Flags().BoolVar(&recreate, "recreate", false, "remove and deploy again a service whose change no live operation makes (env, network, rules, ...)")
	return cmd
}

// applyJSON is apply's -o json document: the changes it worked from (the
// diff's document), the steps it made, and the steps refused, when apply
// stopped (exit 1 or 2, the error on stderr as well).
type applyJSON struct {
	servicesfile.Diff
	Applied []string          `json:"applied"`
	Refused []refusedStepJSON `json:"refused,omitempty"`
	// Preempted are the instances of lower-priority services the steps
	// stopped to make room (deploy, recreate, scale, resize), in step
	// order, each step's by host then ID.
	Preempted []victimJSON `json:"preempted,omitempty"`
}

// refusedStepJSON is a step apply did not make, and why.
type refusedStepJSON struct {
	Action  string `json:"action"`
	Service string `json:"service"`
	Error   string `json:"error"`
}

// refusedFile is apply's err when the file was refused before any step
// (exit 2: a bad value, the planner's check of a service, another
// project's service): with -o json stdout still has the one document,
// with no changes and the refusal, action "check", as for a step the
// planner refused. Other errors (the planner unreachable) are err alone.
func refusedFile(cmd *cobra.Command, out outputFlag, notes []string, err error) error {
	var ee *exitError
	if !out.json() || !errors.As(err, &ee) || ee.code != exitBadInput {
		return err
	}
	d := servicesfile.Diff{Steps: []servicesfile.Step{}, Unchanged: []string{}, LeftAlone: []string{}, LeftAloneWhy: map[string]string{}}
	doc := applyJSON{Diff: withFileNotes(d, notes), Applied: []string{}, Refused: []refusedStepJSON{{Action: "check", Error: err.Error()}}}
	return jsonThen(cmd, out, doc, err)
}

// jsonThen writes doc when out asks for JSON, then returns err: a script
// reading -o json learns what was made before the refusal.
func jsonThen(cmd *cobra.Command, out outputFlag, doc applyJSON, err error) error {
	if out.json() {
		if werr := writeJSON(cmd.OutOrStdout(), doc); werr != nil {
			return werr
		}
	}
	return err
}

// stepFailed is apply's error when step s failed with err after the
// steps made: it names the step, and what was changed. Nothing changed:
// err's exit code (2 for a value the planner refused, 1 for what it cannot
// meet now); something changed: exit 1, naming it (4, outcome unknown,
// stays 4).
func stepFailed(s servicesfile.Step, err error, made []string) error {
	var p *partialStep
	if errors.As(err, &p) {
		made = append(made, p.made)
		err = p.err
	}
	err = apiError(err)
	code := exitUnmet
	if ee := (*exitError)(nil); errors.As(err, &ee) {
		code = ee.code
	}
	if len(made) == 0 {
		return &exitError{code: code, err: fmt.Errorf("%s %s (nothing was changed): %v", s.Action, s.Service, err)}
	}
	if code != exitUnknown {
		code = exitUnmet
	}
	return &exitError{code: code, err: fmt.Errorf("%s %s (changed before it: %s; a second apply continues from there): %v",
		s.Action, s.Service, strings.Join(made, ", "), err)}
}

// partialStep is a step's error after a part of it was made (made, such
// as "remove web" of a recreate).
type partialStep struct {
	made string
	err  error
}

func (p *partialStep) Error() string { return p.err.Error() }
func (p *partialStep) Unwrap() error { return p.err }

// placedHosts are the hosts (sorted) of the instances of the services that
// steps deployed or scaled, for deploy's warning of hosts no agent
// enforces; none when they cannot be read (the apply itself was made).
func placedHosts(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, steps []servicesfile.Step) []string {
	hosts := map[string]bool{}
	for _, s := range steps {
		if s.Action != "deploy" && s.Action != "recreate" && s.Action != "scale" {
			continue
		}
		ins, err := allInstances(ctx, cl, "", s.Service)
		if err != nil {
			return nil
		}
		for _, in := range ins {
			hosts[in.Host] = true
		}
	}
	return slices.Sorted(maps.Keys(hosts))
}

// applyStep makes one step through the API, and returns the instances
// its deploy, scale or resize preempted (those of a deploy whose pull
// replace failed after it too).
func applyStep(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, s servicesfile.Step, pull string) ([]*pinfoldv1.Victim, error) {
	var err error
	var victims []*pinfoldv1.Victim
	switch s.Action {
	case "remove":
		_, err = cl.Remove(ctx, connect.NewRequest(&pinfoldv1.RemoveRequest{Target: s.Service}))
	case "resize":
		var resp *connect.Response[pinfoldv1.ResizeResponse]
		if resp, err = cl.Resize(ctx, connect.NewRequest(s.Resize)); err == nil {
			victims = resp.Msg.Preempted
		}
	case "replace":
		_, err = cl.Replace(ctx, connect.NewRequest(s.Replace))
	case "scale":
		var resp *connect.Response[pinfoldv1.ScaleResponse]
		if resp, err = cl.Scale(ctx, connect.NewRequest(&pinfoldv1.ScaleRequest{Service: s.Service, Count: s.Scale})); err == nil {
			victims = resp.Msg.Preempted
		}
	case "recreate":
		if _, err = cl.Remove(ctx, connect.NewRequest(&pinfoldv1.RemoveRequest{Target: s.Service})); err != nil {
			return nil, err
		}
		s.Deploy.CreateOnly = true
		if victims, err = deployWithPull(ctx, cl, s.Deploy, pull); err != nil {
			made := "remove " + s.Service
			if p := (*partialStep)(nil); errors.As(err, &p) {
				made, err = made+", "+p.made, p.err
			}
			return victims, &partialStep{made: made, err: err}
		}
	case "deploy":
		// Created once: a second apply at the same time is refused
		// (already_exists) instead of adding the instances again.
		s.Deploy.CreateOnly = true
		victims, err = deployWithPull(ctx, cl, s.Deploy, pull)
	default:
		err = fmt.Errorf("unknown step %q", s.Action)
	}
	return victims, err
}

// deployWithPull deploys d; a deploy takes no pull policy, so pull always
// is recorded by a replace that follows (the instances are new: their
// containers are created once the hosts see the replace).
func deployWithPull(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, d *pinfoldv1.DeployRequest, pull string) ([]*pinfoldv1.Victim, error) {
	if d.Count == 0 {
		return nil, fmt.Errorf("count 0: a new service needs at least one instance to be deployed (scale it to 0 afterwards)")
	}
	resp, err := cl.Deploy(ctx, connect.NewRequest(d))
	if err != nil {
		return nil, err
	}
	if pull == "always" {
		if _, err := cl.Replace(ctx, connect.NewRequest(&pinfoldv1.ReplaceRequest{Target: d.Service, Image: d.Image, Command: d.Command, Health: d.Health, Pull: pull})); err != nil {
			return resp.Msg.Preempted, &partialStep{made: "deploy " + d.Service + " (its pull: always not recorded)", err: err}
		}
	}
	return resp.Msg.Preempted, nil
}

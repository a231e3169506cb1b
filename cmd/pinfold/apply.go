package main

import (
	"context"
	"errors"
	"fmt"
	"google.golang.org/protobuf/proto"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/servicesfile"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// step is one change apply makes to bring a service to the file.
type step struct {
	Service string `json:"service"`
	// Action: deploy, scale, resize, replace, remove, or recreate (a
	// change no live operation makes: remove and deploy again).
	Action string `json:"action"`
	Detail string `json:"detail"`

	deploy  *pinfoldv1.DeployRequest
	resize  *pinfoldv1.ResizeRequest
	replace *pinfoldv1.ReplaceRequest
	scale   int32
}

// servicesDiff is what apply would do: the steps in the order it makes
// them, and the services it leaves as they are.
type servicesDiff struct {
	Steps     []step   `json:"changes"`
	Unchanged []string `json:"unchanged"`
	LeftAlone []string `json:"left_alone"` // in the planner, not in the file (no --prune)
	Notes     []string `json:"notes"`
	// Hidden counts the file's values the planner hides from this caller
	// (a viewer), which diff does not compare.
	Hidden int `json:"hidden"`
}

// diffServices compares the file's services with the planner's.
func diffServices(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, want []servicesfile.Service, prune bool) (servicesDiff, error) {
	d := servicesDiff{Steps: []step{}, Unchanged: []string{}, LeftAlone: []string{}, Notes: []string{}}
	ins, err := allInstances(ctx, cl, "", "")
	if err != nil {
		return d, err
	}
	byService := map[string][]*pinfoldv1.Instance{}
	for _, in := range ins {
		byService[in.Service] = append(byService[in.Service], in)
	}
	inFile := map[string]bool{}
	for _, w := range want {
		inFile[w.Deploy.Service] = true
	}
	// Every service as the planner would check it, before any step is
	// made: a deploy the planner refused halfway through the file would
	// leave the steps before it made.
	sb, err := shareBaseOf(ctx, cl, ins)
	if err != nil {
		return d, err
	}
	if err := checkWithPlanner(want, sb); err != nil {
		return d, err
	}
	// Removes first: they free what the others may need.
	for _, name := range sortedKeys(byService) {
		if inFile[name] {
			continue
		}
		if prune {
			d.Steps = append(d.Steps, step{Service: name, Action: "remove", Detail: fmt.Sprintf("not in the file: remove its %s", counted(len(byService[name]), "instance"))})
		} else {
			d.LeftAlone = append(d.LeftAlone, name)
		}
	}
	var deploys, recreates []step
	hidden := 0
	for _, w := range want {
		name := w.Deploy.Service
		resp, err := cl.GetService(ctx, connect.NewRequest(&pinfoldv1.GetServiceRequest{Name: name}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			if w.Deploy.Count == 0 {
				// Nothing runs, as the file wants: no deploy (one needs an
				// instance), and a second apply finds the same.
				d.Unchanged = append(d.Unchanged, name)
				d.Notes = append(d.Notes, fmt.Sprintf("%s: count 0 and not deployed: nothing to do", name))
				continue
			}
			deploys = append(deploys, step{Service: name, Action: "deploy", Detail: describeDeploy(w.Deploy), deploy: w.Deploy})
			continue
		}
		if err != nil {
			return d, err
		}
		steps, blocked := diffService(w, resp.Msg.Service, byService[name])
		hidden += hiddenValues(resp.Msg.Service, w.Deploy)
		if len(blocked) > 0 {
			recreates = append(recreates, step{Service: name, Action: "recreate",
				Detail: strings.Join(blocked, "; ") + ": cannot change live: needs remove + deploy (apply --recreate does that)", deploy: w.Deploy})
			continue
		}
		if len(steps) == 0 {
			d.Unchanged = append(d.Unchanged, name)
		}
		d.Steps = append(d.Steps, steps...)
		if s := w.Deploy.Strategy; s == "each" || s == "fill" {
			d.Notes = append(d.Notes, fmt.Sprintf("%s: count is per host for strategy %s: the number of instances is not compared (use pinfold scale)", name, s))
		}
	}
	d.Steps = append(d.Steps, recreates...)
	d.Steps = append(d.Steps, orderDeploys(deploys)...)
	if d.Hidden = hidden; hidden > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("%s not compared: the planner hides them from this caller (env, log option and secret label values, health check commands)",
			counted(hidden, "hidden value")))
	}
	return d, nil
}

// orderDeploys puts a service after the new services its hard affinity or
// anti-affinity names (they must run first for the rule to see them);
// otherwise by name.
func orderDeploys(deploys []step) []step {
	byName := map[string]step{}
	for _, s := range deploys {
		byName[s.Service] = s
	}
	var out []step
	done := map[string]bool{}
	var visit func(s step, depth int)
	visit = func(s step, depth int) {
		if done[s.Service] || depth > len(deploys) {
			return
		}
		done[s.Service] = true
		// Hard affinity and hard anti-affinity name services that must be
		// placed first for the rule to see them.
		for _, dep := range slices.Sorted(slices.Values(append(slices.Clone(s.deploy.AffinityHard), s.deploy.AntiAffinityHard...))) {
			if o, ok := byName[dep]; ok {
				visit(o, depth+1)
			}
		}
		out = append(out, s)
	}
	for _, s := range deploys {
		visit(s, 0)
	}
	return out
}

// diffService compares a deployed service with the file: the live steps
// that bring it there (a scale down, resize, replace, a scale up, in that
// order: the instances a scale down removes need neither room for the new
// size nor a replace, and those a scale up adds get the new size and
// spec), or what no live step changes.
func diffService(w servicesfile.Service, rec *pinfoldv1.ServiceRecord, ins []*pinfoldv1.Instance) (steps []step, blocked []string) {
	want, name := w.Deploy, w.Deploy.Service
	differs := func(field, from, to string) {
		if from != to {
			blocked = append(blocked, fmt.Sprintf("%s %s → %s", field, orNone(from), orNone(to)))
		}
	}
	differs("strategy", orDefault(rec.Strategy, "auto"), orDefault(want.Strategy, "auto"))
	differs("max_per_host", strconv.Itoa(int(rec.MaxPerHost)), strconv.Itoa(int(want.MaxPerHost)))
	differs("constraint", rec.Constraint, want.Constraint)
	differs("affinity", strings.Join(rec.AffinityHard, ","), strings.Join(want.AffinityHard, ","))
	differs("soft_affinity", strings.Join(rec.AffinitySoft, ","), strings.Join(want.AffinitySoft, ","))
	differs("anti_affinity", strings.Join(rec.AntiAffinityHard, ","), strings.Join(want.AntiAffinityHard, ","))
	differs("soft_anti_affinity", strings.Join(rec.AntiAffinitySoft, ","), strings.Join(want.AntiAffinitySoft, ","))
	differs("placement_policy", rec.PlacementPolicy, want.PlacementPolicy)
	differs("hosts_order", strings.Join(rec.HostsOrder, ","), strings.Join(want.HostsOrder, ","))
	differs("domain_spread", rec.DomainSpread, want.DomainSpread)
	differs("network", rec.Network, want.Network)
	differs("whole_cores", strconv.FormatBool(rec.WholeCores), strconv.FormatBool(want.WholeCores))
	if !envEqual(rec.Env, want.Env) {
		blocked = append(blocked, "env changed")
	}
	differs("ports", portsLine(rec.Ports), portsLine(want.Ports))
	if len(want.Command) == 0 && len(rec.Command) > 0 {
		blocked = append(blocked, "command removed (a replace keeps the old one)")
	}
	if want.Health == nil && rec.Health != nil {
		blocked = append(blocked, "health check removed (a replace keeps the old one)")
	}
	// The size.
	sb := int(rec.ShareBase)
	curPieces, _ := piecesOf(rec.Cpu, sb)
	wantPieces, _ := piecesOf(want.Cpu, sb)
	soft := min(rec.MemorySoftBytes, want.MemoryBytes) // what a resize leaves
	if want.MemorySoftBytes != soft {
		blocked = append(blocked, fmt.Sprintf("memory_soft %s → %s", alloc.FormatBytes(rec.MemorySoftBytes), alloc.FormatBytes(want.MemorySoftBytes)))
	}
	if len(blocked) > 0 {
		return nil, blocked
	}
	var scale *step
	if s := want.Strategy; s != "each" && s != "fill" && rec.Count != want.Count {
		scale = &step{Service: name, Action: "scale", Detail: fmt.Sprintf("count %d → %d", rec.Count, want.Count), scale: want.Count}
	}
	down := scale != nil && want.Count < rec.Count
	if down && want.Count == 0 {
		// None stays: no instance of its own size to bring to the
		// service's first.
		ins = nil
	}
	if down {
		steps = append(steps, *scale)
	}
	// The size: one resize brings the record and every instance to the
	// file's size, each instance by its own delta (to_cpu and
	// to_memory_bytes), all or nothing. An instance of another size (resized
	// on its own, or the service deployed again at another size) is not
	// first brought back to the record's size: one already at the file's
	// size was shrunk and grown again, and a shrink of memory it uses could
	// be refused, so that the file never settled.
	var off []string
	for _, in := range ins {
		if p := plannedPieces(in); p != wantPieces || in.Bind != want.Bind || in.MemoryBytes != want.MemoryBytes {
			off = append(off, fmt.Sprintf("%s (%s, %s)", in.Id, cpuMode(p, in.Bind, sb), alloc.FormatBytes(in.MemoryBytes)))
		}
	}
	if curPieces != wantPieces || rec.MemoryBytes != want.MemoryBytes || rec.Bind != want.Bind || len(off) > 0 {
		// The size read is the one the planner must still hold: two applies
		// at once resize once (the second is refused, aborted).
		b := want.Bind
		r := &pinfoldv1.ResizeRequest{Target: name, ExpectCpu: rec.Cpu, ExpectMemoryBytes: rec.MemoryBytes,
			ToCpu: alloc.FormatPieces(wantPieces, sb), ToMemoryBytes: want.MemoryBytes, Bind: &b}
		var what []string
		if curPieces != wantPieces {
			what = append(what, fmt.Sprintf("cpu %s → %s (%s)", rec.Cpu, alloc.FormatPieces(wantPieces, sb), signed(alloc.FormatPieces(wantPieces-curPieces, sb))))
		}
		if rec.MemoryBytes != want.MemoryBytes {
			what = append(what, fmt.Sprintf("memory %s → %s", alloc.FormatBytes(rec.MemoryBytes), alloc.FormatBytes(want.MemoryBytes)))
		}
		if rec.Bind != want.Bind {
			what = append(what, fmt.Sprintf("bind %t → %t", rec.Bind, want.Bind))
		}
		detail := strings.Join(what, ", ")
		if len(off) > 0 {
			n, of := counted(len(off), "instance"), ""
			if gone := len(ins) - int(want.Count); down && gone > 0 {
				// The scale down before it removes gone instances, the
				// planner's worst placed first: of those of another size,
				// at least lo stay and at most hi.
				lo, hi := max(0, len(off)-gone), min(len(off), int(want.Count))
				switch {
				case lo == hi && lo < len(off):
					n, of = counted(lo, "instance"), fmt.Sprintf(" (the scale down leaves %d of these %d)", lo, len(off))
				case lo != hi:
					n, of = fmt.Sprintf("%d to %d instances", lo, hi), fmt.Sprintf(" (the scale down picks which of these %d stay)", len(off))
				}
			}
			detail = strings.TrimPrefix(detail+"; ", "; ") + fmt.Sprintf("%s of another size to %s, %s: %s%s", n,
				cpuMode(wantPieces, want.Bind, sb), alloc.FormatBytes(want.MemoryBytes), strings.Join(off, ", "), of)
		}
		steps = append(steps, step{Service: name, Action: "resize", Detail: detail, resize: r})
	}
	// The spec a replace changes: image, command, health check, pull.
	var what []string
	if rec.Image != want.Image {
		what = append(what, fmt.Sprintf("image %s → %s", rec.Image, want.Image))
	}
	if len(want.Command) > 0 && !slices.Equal(rec.Command, want.Command) {
		what = append(what, fmt.Sprintf("command %q → %q", rec.Command, want.Command))
	}
	if want.Health != nil && !healthEqual(rec.Health, want.Health) {
		what = append(what, "health check changed")
	}
	if orDefault(rec.Pull, "missing") != orDefault(w.Pull, "missing") {
		what = append(what, fmt.Sprintf("pull %s → %s", orDefault(rec.Pull, "missing"), orDefault(w.Pull, "missing")))
	}
	// The container settings go with a replace, as a whole: none in the
	// file clears them (an empty set).
	var ctr *pinfoldv1.ContainerSpec
	if seen, _ := seenContainer(rec.Container, want.Container); !proto.Equal(rec.Container, seen) {
		what = append(what, "container settings changed ("+containerLine(rec.Container)+" → "+containerLine(want.Container)+")")
		ctr = want.Container
		if ctr == nil {
			ctr = &pinfoldv1.ContainerSpec{}
		}
	}
	if len(what) == 0 {
		for _, in := range ins { // an instance replaced on its own
			if in.Image != want.Image || len(want.Command) > 0 && !slices.Equal(in.Command, want.Command) {
				what = append(what, fmt.Sprintf("instance %s runs %s", in.Id, in.Image))
				break
			}
		}
	}
	if len(what) > 0 {
		steps = append(steps, step{Service: name, Action: "replace", Detail: strings.Join(what, ", "),
			replace: &pinfoldv1.ReplaceRequest{Target: name, Image: want.Image, Command: want.Command, Health: want.Health, Pull: orDefault(w.Pull, "missing"), Container: ctr}})
	}
	if scale != nil && !down {
		steps = append(steps, *scale)
	}
	return steps, nil
}

// cpuMode is pieces as CPUs with the mode: "1.5 (bound)", "2 (memory-first)".
func cpuMode(pieces int, bind bool, sb int) string {
	if bind {
		return alloc.FormatPieces(pieces, sb) + " (bound)"
	}
	return alloc.FormatPieces(pieces, sb) + " (memory-first)"
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

func piecesOf(cpu string, sb int) (int, error) {
	f, err := strconv.ParseFloat(cpu, 64)
	if err != nil {
		return 0, err
	}
	return alloc.PiecesOf("cpu", f, sb)
}

func signed(s string) string {
	if strings.HasPrefix(s, "-") {
		return s
	}
	return "+" + s
}

func orNone(s string) string { return orDefault(s, "(none)") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// What a viewer's answers hide (planner/api/redact.go): diff compares
// what it sees and counts what it cannot (hiddenValues), so that a value
// it cannot see is no change.

// envEqual compares environments in any order; a viewer's record holds
// the names only (SECRET, not SECRET=x), and then the names are compared.
func envEqual(cur, want []string) bool {
	if len(cur) != len(want) {
		return false
	}
	byName := func(a, b string) int {
		return strings.Compare(envName(a), envName(b))
	}
	cur, want = slices.SortedStableFunc(slices.Values(cur), byName), slices.SortedStableFunc(slices.Values(want), byName)
	for i := range cur {
		if strings.Contains(cur[i], "=") {
			if cur[i] != want[i] {
				return false
			}
		} else if envName(want[i]) != cur[i] {
			return false
		}
	}
	return true
}

func envName(e string) string {
	k, _, _ := strings.Cut(e, "=")
	return k
}

// hiddenExec reports whether a record's health check command is hidden
// from this caller.
func hiddenExec(h *pinfoldv1.HealthCheck) bool {
	return h != nil && slices.Equal(h.Exec, []string{api.HiddenCommand})
}

func healthEqual(a, b *pinfoldv1.HealthCheck) bool {
	if a == nil || b == nil {
		return a == b
	}
	exec := slices.Equal(a.Exec, b.Exec) || hiddenExec(a) && len(b.Exec) > 0
	return exec && a.Tcp == b.Tcp && a.Http == b.Http && orDefault(a.Timeout, "30s") == orDefault(b.Timeout, "30s")
}

// seenContainer is want as a caller who sees cur sees it: the values cur
// hides (every log option's, a secret label's: emptied) emptied in want
// too, and how many that hides.
func seenContainer(cur, want *pinfoldv1.ContainerSpec) (*pinfoldv1.ContainerSpec, int) {
	if want == nil || cur == nil {
		return want, 0
	}
	out, n := proto.CloneOf(want), 0
	for k, v := range out.LogOpts {
		if c, ok := cur.LogOpts[k]; ok && c == "" && v != "" {
			out.LogOpts[k], n = "", n+1
		}
	}
	for k, v := range out.Labels {
		if c, ok := cur.Labels[k]; ok && c == "" && v != "" && api.SecretLabel(k) {
			out.Labels[k], n = "", n+1
		}
	}
	return out, n
}

// hiddenValues counts the values of want that rec hides from this caller
// (a viewer): env values, log option and secret label values, a health
// check's command. diff does not compare them.
func hiddenValues(rec *pinfoldv1.ServiceRecord, want *pinfoldv1.DeployRequest) int {
	n := 0
	names := map[string]bool{}
	for _, e := range want.Env {
		names[envName(e)] = true
	}
	for _, e := range rec.Env {
		if !strings.Contains(e, "=") && names[e] {
			n++
		}
	}
	if hiddenExec(rec.Health) && want.Health != nil && len(want.Health.Exec) > 0 {
		n++
	}
	_, c := seenContainer(rec.Container, want.Container)
	return n + c
}

func describeDeploy(d *pinfoldv1.DeployRequest) string {
	mode := "memory-first"
	if d.Bind {
		mode = "bound"
	}
	return fmt.Sprintf("%s × %s (%s %s, %s)", counted(int(d.Count), "instance"), d.Image, cpusOf(d.Cpu), mode, alloc.FormatBytes(d.MemoryBytes))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// readServicesFile reads -f (- is standard input).
func readServicesFile(cmd *cobra.Command, path string) ([]servicesfile.Service, error) {
	if path == "" {
		return nil, badInput("-f FILE is required: a services file (YAML or JSON) or a docker compose file")
	}
	var (
		data []byte
		err  error
	)
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
		return nil, badInput("-f %q: %v", path, err)
	}
	want, notes, err := servicesfile.Decode(data)
	if err != nil {
		return nil, &exitError{code: exitBadInput, err: fmt.Errorf("%s: %w (nothing was changed)", path, err)}
	}
	for _, n := range notes {
		fmt.Fprintln(cmd.ErrOrStderr(), n)
	}
	for i := range want {
		want[i].File = path
	}
	return want, nil
}

func printDiff(cmd *cobra.Command, d servicesDiff, applied bool) {
	w := cmd.OutOrStdout()
	for _, s := range d.Steps {
		fmt.Fprintf(w, "%-8s %s: %s\n", s.Action, s.Service, s.Detail)
	}
	for _, n := range d.Unchanged {
		fmt.Fprintf(w, "%-8s %s\n", "same", n)
	}
	for _, n := range d.LeftAlone {
		fmt.Fprintf(w, "%-8s %s: not in the file, left alone (--prune removes it)\n", "keep", n)
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
      strategy: auto             # and the rules: max_per_host, constraint,
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
environment, network_mode, pull_policy, healthcheck, deploy.replicas,
deploy.resources.limits.cpus and .memory, deploy.resources.reservations.memory
(soft memory), cpus/mem_limit/mem_reservation, ports (TCP: "8080:80" is
the static host port p80=8080:80, "80" a dynamic one named p80), volumes
(absolute host paths and named volumes) and restart or
deploy.restart_policy. Every other key, and a port or volume pinfold has
no form for (a host address, UDP, a range, a relative path), is named as
ignored, per service. Compose services are memory-first (no bind);
a compose variable (${...}) is refused: pinfold does not fill them in.

Compared with the planner (GetService, ListInstances), each service is:
  deploy    new: placed with its size and rules
  resize    cpu, memory or bind differ: resized in place by the difference
            (an instance of another size than its service, resized on its
            own or deployed at another size: that instance first)
  replace   image, command, health check, pull or the container settings
            (volumes, restart, ...) differ: blue-green replace
  scale     count differs (not for each and fill, whose count is per host);
            a scale down comes before the service's resize and replace
  recreate  what no live change makes: env, network, whole_cores, a soft
            memory a resize does not leave, a removed command or health
            check, ports, or a rule (strategy, max_per_host, constraint,
            affinities, placement_policy, hosts_order, domain_spread):
            needs remove + deploy; apply refuses (exit 1, nothing changed)
            unless --recreate
  remove    in the planner, not in the file: only with --prune; without
            it the service is left alone and said so
use_buffer is used when a service is deployed and not compared.`

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
			want, err := readServicesFile(cmd, file)
			if err != nil {
				return err
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				d, err := diffServices(cmd.Context(), cl, want, prune)
				if err != nil {
					return err
				}
				if out.json() {
					if err := writeJSON(cmd.OutOrStdout(), d); err != nil {
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
	cmd.Flags().BoolVar(&prune, "prune", false, "also remove the planner's services the file does not have")
	return cmd
}

func newApplyCmd() *cobra.Command {
	var (
		c        clientFlags
		out      outputFlag
		file     string
		prune    bool
		recreate bool
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
nothing changed (3 and 4 as for every command).

` + applyFileHelp,
		Example: `  pinfold apply -f services.yaml
  pinfold apply -f compose.yaml --prune
  pinfold apply -f services.yaml --recreate -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			want, err := readServicesFile(cmd, file)
			if err != nil {
				return err
			}
			pulls := map[string]string{}
			for _, w := range want {
				pulls[w.Deploy.Service] = w.Pull
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				ctx := cmd.Context()
				d, err := diffServices(ctx, cl, want, prune)
				if err != nil {
					return err
				}
				var blocked []string
				for _, s := range d.Steps {
					if s.Action == "recreate" && !recreate {
						blocked = append(blocked, s.Service+": "+s.Detail)
					}
				}
				if len(blocked) > 0 {
					return &exitError{code: exitUnmet, err: fmt.Errorf("nothing was changed: %s", strings.Join(blocked, "\n  "))}
				}
				var made []string
				for _, s := range d.Steps {
					if err := applyStep(ctx, cl, s, pulls[s.Service]); err != nil {
						return stepFailed(s, err, made)
					}
					made = append(made, s.Action+" "+s.Service)
					if !out.json() {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: done\n", s.Action, s.Service)
					}
				}
				if out.json() {
					return writeJSON(cmd.OutOrStdout(), d)
				}
				printDiff(cmd, d, true)
				return nil
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the services file (YAML or JSON, or a docker compose file; - for standard input)")
	cmd.Flags().BoolVar(&prune, "prune", false, "also remove the planner's services the file does not have")
	cmd.Flags().BoolVar(&recreate, "recreate", false, "remove and deploy again a service whose change no live operation makes (env, network, rules, ...)")
	return cmd
}

// stepFailed is apply's error when step s failed with err after the
// steps made: it names the step, and what was changed. Nothing changed:
// err's exit code (2 for a value the planner refused, 1 for what it cannot
// meet now); something changed: exit 1, naming it (4, outcome unknown,
// stays 4).
func stepFailed(s step, err error, made []string) error {
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

// applyStep makes one step through the API.
func applyStep(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, s step, pull string) error {
	var err error
	switch s.Action {
	case "remove":
		_, err = cl.Remove(ctx, connect.NewRequest(&pinfoldv1.RemoveRequest{Target: s.Service}))
	case "resize":
		_, err = cl.Resize(ctx, connect.NewRequest(s.resize))
	case "replace":
		_, err = cl.Replace(ctx, connect.NewRequest(s.replace))
	case "scale":
		_, err = cl.Scale(ctx, connect.NewRequest(&pinfoldv1.ScaleRequest{Service: s.Service, Count: s.scale}))
	case "recreate":
		if _, err = cl.Remove(ctx, connect.NewRequest(&pinfoldv1.RemoveRequest{Target: s.Service})); err != nil {
			return err
		}
		s.deploy.CreateOnly = true
		if err = deployWithPull(ctx, cl, s.deploy, pull); err != nil {
			made := "remove " + s.Service
			if p := (*partialStep)(nil); errors.As(err, &p) {
				made, err = made+", "+p.made, p.err
			}
			return &partialStep{made: made, err: err}
		}
	case "deploy":
		// Created once: a second apply at the same time is refused
		// (already_exists) instead of adding the instances again.
		s.deploy.CreateOnly = true
		err = deployWithPull(ctx, cl, s.deploy, pull)
	default:
		err = fmt.Errorf("unknown step %q", s.Action)
	}
	return err
}

// deployWithPull deploys d; a deploy takes no pull policy, so pull always
// is recorded by a replace that follows (the instances are new: their
// containers are created once the hosts see the replace).
func deployWithPull(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, d *pinfoldv1.DeployRequest, pull string) error {
	if d.Count == 0 {
		return fmt.Errorf("count 0: a new service needs at least one instance to be deployed (scale it to 0 afterwards)")
	}
	if _, err := cl.Deploy(ctx, connect.NewRequest(d)); err != nil {
		return err
	}
	if pull == "always" {
		if _, err := cl.Replace(ctx, connect.NewRequest(&pinfoldv1.ReplaceRequest{Target: d.Service, Image: d.Image, Command: d.Command, Health: d.Health, Pull: pull})); err != nil {
			return &partialStep{made: "deploy " + d.Service + " (its pull: always not recorded)", err: err}
		}
	}
	return nil
}

// portsLine is ports as deploy's --port flags write them ("" for none).
func portsLine(ports []*pinfoldv1.Port) string {
	var out []string
	for _, p := range pinfoldv1.PortsModel(ports) {
		out = append(out, p.String())
	}
	return strings.Join(out, " ")
}

// containerLine is c in a line: its volumes, restart policy and so on.
func containerLine(c *pinfoldv1.ContainerSpec) string {
	m := c.Model()
	if m.IsZero() {
		return "none"
	}
	var out []string
	add := func(k string, v any, set bool) {
		if set {
			out = append(out, fmt.Sprintf("%s %v", k, v))
		}
	}
	add("volumes", m.Volumes, len(m.Volumes) > 0)
	add("restart", m.Restart, m.Restart != "")
	add("labels", m.Labels, len(m.Labels) > 0)
	add("user", m.User, m.User != "")
	add("workdir", m.Workdir, m.Workdir != "")
	add("read_only", m.ReadOnly, m.ReadOnly)
	add("cap_add", m.CapAdd, len(m.CapAdd) > 0)
	add("cap_drop", m.CapDrop, len(m.CapDrop) > 0)
	add("log_driver", m.LogDriver, m.LogDriver != "")
	add("log_opts", m.LogOpts, len(m.LogOpts) > 0)
	return strings.Join(out, ", ")
}

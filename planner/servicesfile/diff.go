package servicesfile

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// Step is one change apply makes to bring a service to the file.
type Step struct {
	Service string `json:"service"`
	// Action: deploy, scale, resize, replace, remove, or recreate (a
	// change no live operation makes: remove and deploy again).
	Action string `json:"action"`
	Detail string `json:"detail"`

	// The request the step sends (per Action); not in the JSON output.
	Deploy  *pinfoldv1.DeployRequest  `json:"-"`
	Resize  *pinfoldv1.ResizeRequest  `json:"-"`
	Replace *pinfoldv1.ReplaceRequest `json:"-"`
	Scale   int32                     `json:"-"`
	// Removes is a remove's count of instances (apply asks for --yes past
	// a bound).
	Removes int `json:"removes,omitempty"`
}

// Diff is what apply would do: the steps in the order it makes them, and
// the services it leaves as they are.
type Diff struct {
	Steps     []Step   `json:"changes"`
	Unchanged []string `json:"unchanged"`
	LeftAlone []string `json:"left_alone"` // in the planner, not in the file, not removed
	// LeftAloneWhy is, for each service of LeftAlone, whose it is and what
	// --prune does with it: "deployed by hand: --prune leaves it", "of
	// project P, not Q: --prune leaves it", "of project Q: --prune removes
	// it".
	LeftAloneWhy map[string]string `json:"left_alone_why"`
	Notes        []string          `json:"notes"`
	// Hidden counts the file's values the planner hides from this caller
	// (a viewer), which diff does not compare.
	Hidden int `json:"hidden"`
}

// Prune is what apply --prune may remove: with On, a service the planner
// runs and the file does not have is removed when it belongs to the
// file's Project (Sources: each such service's source, its record's);
// services of other projects and those deployed by hand are left alone.
// Without On, Sources still says why each is left alone (LeftAloneWhy).
type Prune struct {
	On      bool
	Project string
	Sources map[string]string
}

// Compare compares the file's services (want, checked: Decode and the
// planner's check) with the planner's: records holds each service of
// want the planner has (GetService; one it has not is missing), and
// instances every instance it runs (ListInstances). A service the planner
// runs and the file does not have is removed when prune allows it, else
// left alone.
func Compare(want []Service, records map[string]*pinfoldv1.ServiceRecord, instances []*pinfoldv1.Instance, prune Prune) Diff {
	d := Diff{Steps: []Step{}, Unchanged: []string{}, LeftAlone: []string{}, LeftAloneWhy: map[string]string{}, Notes: []string{}}
	byService := map[string][]*pinfoldv1.Instance{}
	for _, in := range instances {
		byService[in.Service] = append(byService[in.Service], in)
	}
	inFile := map[string]bool{}
	for _, w := range want {
		inFile[w.Deploy.Service] = true
	}
	// Removes first: they free what the others may need.
	for _, name := range slices.Sorted(maps.Keys(byService)) {
		if inFile[name] {
			continue
		}
		source := prune.Sources[name]
		if prune.On && source == prune.Project {
			d.Steps = append(d.Steps, Step{Service: name, Action: "remove", Removes: len(byService[name]),
				Detail: fmt.Sprintf("not in the file: remove its %s (project %s)", counted(len(byService[name]), "instance"), source)})
			continue
		}
		d.LeftAlone = append(d.LeftAlone, name)
		switch {
		case source == "":
			d.LeftAloneWhy[name] = "deployed by hand: --prune leaves it"
			if prune.On {
				d.Notes = append(d.Notes, fmt.Sprintf("%s: deployed by hand, not by project %s: --prune leaves it", name, prune.Project))
			}
		case source != prune.Project:
			d.LeftAloneWhy[name] = fmt.Sprintf("of project %s, not %s: --prune leaves it", source, prune.Project)
			if prune.On {
				d.Notes = append(d.Notes, fmt.Sprintf("%s: of project %s, not %s: --prune leaves it", name, source, prune.Project))
			}
		default:
			d.LeftAloneWhy[name] = fmt.Sprintf("of project %s: --prune removes it", source)
		}
	}
	var deploys, recreates []Step
	hidden := 0
	for _, w := range want {
		name := w.Deploy.Service
		rec, ok := records[name]
		if !ok || rec == nil {
			if w.Deploy.Count == 0 {
				// Nothing runs, as the file wants: no deploy (one needs an
				// instance), and a second apply finds the same.
				d.Unchanged = append(d.Unchanged, name)
				d.Notes = append(d.Notes, fmt.Sprintf("%s: count 0 and not deployed: nothing to do", name))
				continue
			}
			deploys = append(deploys, Step{Service: name, Action: "deploy", Detail: describeDeploy(w.Deploy), Deploy: w.Deploy})
			continue
		}
		steps, blocked := diffService(w, rec, byService[name])
		hidden += hiddenValues(rec, w.Deploy)
		if len(blocked) > 0 {
			recreates = append(recreates, Step{Service: name, Action: "recreate",
				Detail: strings.Join(blocked, "; ") + ": cannot change live: needs remove + deploy (apply --recreate does that)", Deploy: w.Deploy})
			continue
		}
		if len(steps) == 0 {
			d.Unchanged = append(d.Unchanged, name)
		}
		d.Steps = append(d.Steps, steps...)
	}
	d.Steps = append(d.Steps, recreates...)
	d.Steps = append(d.Steps, orderDeploys(deploys)...)
	if d.Hidden = hidden; hidden > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("%s not compared: the planner hides them from this caller (env, log option and secret label values, health check commands)",
			counted(hidden, "hidden value")))
	}
	return d
}

// orderDeploys puts a service after the new services its hard affinity or
// anti-affinity names (they must run first for the rule to see them);
// otherwise by name.
func orderDeploys(deploys []Step) []Step {
	byName := map[string]Step{}
	for _, s := range deploys {
		byName[s.Service] = s
	}
	var out []Step
	done := map[string]bool{}
	var visit func(s Step, depth int)
	visit = func(s Step, depth int) {
		if done[s.Service] || depth > len(deploys) {
			return
		}
		done[s.Service] = true
		// Hard affinity and hard anti-affinity name services that must be
		// placed first for the rule to see them.
		for _, dep := range slices.Sorted(slices.Values(append(slices.Clone(s.Deploy.AffinityHard), s.Deploy.AntiAffinityHard...))) {
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
func diffService(w Service, rec *pinfoldv1.ServiceRecord, ins []*pinfoldv1.Instance) (steps []Step, blocked []string) {
	want, name := w.Deploy, w.Deploy.Service
	differs := func(field, from, to string) {
		if from != to {
			blocked = append(blocked, fmt.Sprintf("%s %s → %s", field, orNone(from), orNone(to)))
		}
	}
	blocked = append(blocked, schedulingChanges(rec.Model(0).Scheduling, want.Model(0).Scheduling)...)
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
	var scale *Step
	down := false
	if perHost(want.Strategy) {
		// Each and fill count per host: the instances of every host
		// holding any against the file's count, as scale brings them
		// (capped at max per host); a host the rules would take that
		// holds none is not seen here.
		each := want.Count
		if want.MaxPerHost > 0 {
			each = min(each, want.MaxPerHost)
		}
		fewest, most := perHostCounts(ins)
		if most == 0 && each > 0 || most > 0 && (fewest != int(each) || most != int(each)) {
			from := strconv.Itoa(most)
			if fewest != most {
				from = fmt.Sprintf("%d to %d", fewest, most)
			}
			scale = &Step{Service: name, Action: "scale", Detail: fmt.Sprintf("count per host %s → %d", from, each), Scale: want.Count}
			down = int(each) < most
		}
	} else if rec.Count != want.Count {
		scale = &Step{Service: name, Action: "scale", Detail: fmt.Sprintf("count %d → %d", rec.Count, want.Count), Scale: want.Count}
		down = want.Count < rec.Count
	}
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
		if p := in.Model().Pieces(); p != wantPieces || in.Bind != want.Bind || in.MemoryBytes != want.MemoryBytes {
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
			if gone := len(ins) - int(want.Count); down && gone > 0 && !perHost(want.Strategy) {
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
		steps = append(steps, Step{Service: name, Action: "resize", Detail: detail, Resize: r})
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
	// The container settings go with a replace, as a whole (the file
	// holds every setting: none in it clears them), shown setting by
	// setting.
	var ctr *pinfoldv1.ContainerSpec
	if seen, _ := seenContainer(rec.Container, want.Container); !proto.Equal(rec.Container, seen) {
		changes := model.ContainerChanges(rec.Container.Model(), seen.Model())
		if len(changes) == 0 {
			changes = []string{"container settings reordered"}
		}
		what = append(what, changes...)
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
	if ctr == nil {
		// An instance whose container settings were replaced on its own
		// (replace INSTANCE --cap-add …): the record is the file's, so
		// only the file's settings sent as a whole bring it back (a
		// replace without them keeps each instance's own).
		if drift := containerDrift(ins, want.Container); len(drift) > 0 {
			what = append(what, drift...)
			ctr = want.Container
			if ctr == nil {
				ctr = &pinfoldv1.ContainerSpec{}
			}
		}
	}
	if len(what) > 0 {
		steps = append(steps, Step{Service: name, Action: "replace", Detail: strings.Join(what, ", "),
			Replace: &pinfoldv1.ReplaceRequest{Target: name, Image: want.Image, Command: want.Command, Health: want.Health, Pull: orDefault(w.Pull, "missing"), Container: ctr}})
	}
	if scale != nil && !down {
		steps = append(steps, *scale)
	}
	return steps, nil
}

// perHost reports whether strategy st counts per host (each and fill:
// deploy's and scale's count is per host).
func perHost(st string) bool { return st == "each" || st == "fill" }

// perHostCounts is the fewest and the most instances of ins one host
// holds, among the hosts holding any (a move's replacement counted once,
// with the instance it replaces, as scale counts them); 0, 0 for none.
func perHostCounts(ins []*pinfoldv1.Instance) (fewest, most int) {
	per := map[string]int{}
	for _, in := range ins {
		if in.Replaces == "" {
			per[in.Host]++
		}
	}
	if len(per) == 0 {
		return 0, 0
	}
	counts := slices.Collect(maps.Values(per))
	return slices.Min(counts), slices.Max(counts)
}

// cpuMode is pieces as CPUs with the mode: "1.5 (bound)", "2 (memory-first)".
func cpuMode(pieces int, bind bool, sb int) string {
	if bind {
		return alloc.FormatPieces(pieces, sb) + " (bound)"
	}
	return alloc.FormatPieces(pieces, sb) + " (memory-first)"
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
	return h != nil && slices.Equal(h.Exec, []string{model.HiddenCommand})
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
		if c, ok := cur.Labels[k]; ok && c == "" && v != "" && model.SecretLabel(k) {
			out.Labels[k], n = "", n+1
		}
	}
	return out, n
}

// containerDrift says, for each instance of ins whose container settings
// differ from the file's (want), what a replace with the file's settings
// changes there: "instance u-2: cap_add SYS_ADMIN removed, volumes
// /:/host removed (its own settings differ from the file)"; past
// maxDriftShown instances, how many more. A value the planner hides from
// this caller (seenContainer) is no difference.
func containerDrift(ins []*pinfoldv1.Instance, want *pinfoldv1.ContainerSpec) []string {
	var out []string
	more := 0
	for _, in := range ins {
		seen, _ := seenContainer(in.Container, want)
		if changes := model.ContainerChanges(in.Container.Model(), seen.Model()); len(changes) > 0 {
			if len(out) == maxDriftShown {
				more++
				continue
			}
			out = append(out, fmt.Sprintf("instance %s: %s (its own settings differ from the file)", in.Id, strings.Join(changes, ", ")))
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("and %s with settings of their own", strings.Replace(counted(more, "instance"), " ", " more ", 1)))
	}
	return out
}

// maxDriftShown is how many instances with settings of their own diff
// names one by one (a service of hundreds would fill the screen).
const maxDriftShown = 3

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
	count := counted(int(d.Count), "instance")
	if perHost(d.Strategy) {
		count = fmt.Sprintf("%d per host", d.Count)
	}
	return fmt.Sprintf("%s × %s (%s %s, %s)", count, d.Image, cpusOf(d.Cpu), mode, alloc.FormatBytes(d.MemoryBytes))
}

// portsLine is ports as deploy's --port flags write them ("" for none).
func portsLine(ports []*pinfoldv1.Port) string {
	var out []string
	for _, p := range pinfoldv1.PortsModel(ports) {
		out = append(out, p.String())
	}
	return strings.Join(out, " ")
}

// counted is n nouns: "1 instance", "3 instances".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// cpusOf is a CPU amount with its unit: "1 CPU", "1.5 CPUs".
func cpusOf(cpu string) string {
	if cpu == "1" {
		return "1 CPU"
	}
	return cpu + " CPUs"
}

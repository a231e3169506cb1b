package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// SpecPatch is what a replace changes in a Spec: each setting it names,
// and nothing else. Every setting it does not name keeps its value
// (Spec.Patched); a setting goes only when a field here removes it by
// name (VolumesRm, LabelsRm, …). Env, Network and Ports are not a
// replace's: a deploy changes them.
type SpecPatch struct {
	Image   string       // "" keeps
	Command []string     // nil keeps
	Health  *HealthCheck // nil keeps
	Pull    string       // the replace's own policy: PullMissing or PullAlways
	// Container, when set, replaces the container settings as a whole:
	// the declarative form, a services file's apply, where the file holds
	// every setting. The Edit must then be empty.
	Container *Container
	Edit      ContainerEdit
}

// ContainerEdit changes a Container setting by setting: a nil pointer or
// an empty list names nothing. Removals apply before additions, so that
// the same request can drop a volume and mount another at its path.
type ContainerEdit struct {
	// Volumes are mounted, each replacing the volume at its container
	// path; VolumesRm unmounts by container path (/data) or by the whole
	// volume (SOURCE:TARGET: its container path counts).
	Volumes, VolumesRm []string
	Restart            *string // "no" sets no restart policy
	// Labels are set (a key's value replaced); LabelsRm removes by key.
	Labels   map[string]string
	LabelsRm []string
	User     *string // "": the image's user
	Workdir  *string // "": the image's working directory
	ReadOnly *bool
	// CapAdd and CapDrop join their lists; CapAddRm and CapDropRm leave
	// them (by name, CAP_ optional).
	CapAdd, CapAddRm, CapDrop, CapDropRm []string
	LogDriver                            *string // "": the engine's default
	// LogOpts are set (a key's value replaced); LogOptsRm removes by key.
	LogOpts   map[string]string
	LogOptsRm []string
}

// IsZero reports whether e names no setting.
func (e ContainerEdit) IsZero() bool {
	return len(e.Volumes) == 0 && len(e.VolumesRm) == 0 && e.Restart == nil && len(e.Labels) == 0 && len(e.LabelsRm) == 0 &&
		e.User == nil && e.Workdir == nil && e.ReadOnly == nil && len(e.CapAdd) == 0 && len(e.CapAddRm) == 0 &&
		len(e.CapDrop) == 0 && len(e.CapDropRm) == 0 && e.LogDriver == nil && len(e.LogOpts) == 0 && len(e.LogOptsRm) == 0
}

// Validate checks p's own values: each entry of the edit is one the
// container's fields take, each list is bounded like those fields (a
// removal too), and a whole Container comes without an edit. The merged
// Container is the caller's to Validate: it may exceed a limit the edit
// alone does not.
func (p SpecPatch) Validate() error {
	if p.Container != nil && !p.Edit.IsZero() {
		return fmt.Errorf("container: set as a whole and edited in one replace: send one or the other")
	}
	if p.Container != nil {
		return p.Container.Validate()
	}
	return p.Edit.Validate()
}

// Validate checks e's entries (see SpecPatch.Validate).
func (e ContainerEdit) Validate() error {
	lists := []struct {
		key  string
		list []string
		max  int
	}{{"volumes", e.Volumes, MaxVolumes}, {"volumes_rm", e.VolumesRm, MaxVolumes}, {"labels_rm", e.LabelsRm, MaxLabels},
		{"cap_add", e.CapAdd, MaxCaps}, {"cap_add_rm", e.CapAddRm, MaxCaps}, {"cap_drop", e.CapDrop, MaxCaps},
		{"cap_drop_rm", e.CapDropRm, MaxCaps}, {"log_opts_rm", e.LogOptsRm, MaxLogOpts}}
	for _, l := range lists {
		if len(l.list) > l.max {
			return fmt.Errorf("%s: %d entries: want at most %d", l.key, len(l.list), l.max)
		}
		for _, s := range l.list {
			if s == "" || len(s) > MaxFieldLen || strings.ContainsAny(s, "\r\n\x00") {
				return fmt.Errorf("%s entry %.100q: want 1 to %d bytes, no newlines or NULs", l.key, s, MaxFieldLen)
			}
		}
	}
	for _, s := range e.VolumesRm {
		if _, err := volumeTarget(s); err != nil {
			return fmt.Errorf("volumes_rm: %w", err)
		}
	}
	for _, s := range slices.Concat(e.CapAddRm, e.CapDropRm) {
		if _, ok := Capability(s); !ok {
			return fmt.Errorf("cap_add_rm or cap_drop_rm %q: want a capability's name (CAP_ optional) or ALL", s)
		}
	}
	var c Container // the additions alone, checked as a container's
	c.Volumes, c.Labels, c.CapAdd, c.CapDrop, c.LogOpts = e.Volumes, e.Labels, e.CapAdd, e.CapDrop, e.LogOpts
	for p, v := range map[*string]*string{&c.Restart: e.Restart, &c.User: e.User, &c.Workdir: e.Workdir, &c.LogDriver: e.LogDriver} {
		if v != nil {
			*p = *v
		}
	}
	return c.Validate()
}

// volumeTarget is the container path a removal names: "/data", or a
// whole volume's TARGET.
func volumeTarget(s string) (string, error) {
	if !strings.Contains(s, ":") {
		if !strings.HasPrefix(s, "/") {
			return "", fmt.Errorf("%q: want a container path (/data) or a volume (SOURCE:TARGET)", s)
		}
		return s, nil
	}
	v, err := ParseVolume(s)
	if err != nil {
		return "", err
	}
	return v.Target, nil
}

// Patched is s with p's changes and every other setting as it was. Pure:
// s is not changed (its lists and maps are not written).
func (s Spec) Patched(p SpecPatch) Spec {
	if p.Image != "" {
		s.Image = p.Image
	}
	if p.Command != nil {
		s.Command = slices.Clone(p.Command)
	}
	if p.Health != nil {
		h := *p.Health
		s.Health = &h
	}
	s.Pull = p.Pull
	if p.Container != nil {
		s.Container = *p.Container
	} else {
		s.Container = s.Container.Edited(p.Edit)
	}
	return s
}

// Edited is c with e's changes (removals first) and every other setting
// as it was; a removal of a setting c lacks changes nothing. Pure.
func (c Container) Edited(e ContainerEdit) Container {
	c.Volumes = editVolumes(c.Volumes, e.VolumesRm, e.Volumes)
	if e.Restart != nil {
		c.Restart = *e.Restart
	}
	c.Labels = editMap(c.Labels, e.LabelsRm, e.Labels)
	for p, v := range map[*string]*string{&c.User: e.User, &c.Workdir: e.Workdir, &c.LogDriver: e.LogDriver} {
		if v != nil {
			*p = *v
		}
	}
	if e.ReadOnly != nil {
		c.ReadOnly = *e.ReadOnly
	}
	c.CapAdd = editCaps(c.CapAdd, e.CapAddRm, e.CapAdd)
	c.CapDrop = editCaps(c.CapDrop, e.CapDropRm, e.CapDrop)
	c.LogOpts = editMap(c.LogOpts, e.LogOptsRm, e.LogOpts)
	return c
}

// targetOf is a volume's container path; one that does not parse is its
// own (it matches only itself).
func targetOf(s string) string {
	v, err := ParseVolume(s)
	if err != nil {
		return s
	}
	return v.Target
}

// editVolumes is cur less the volumes at rm's container paths, then with
// add's, each in place of the one at its path (or after the others).
func editVolumes(cur, rm, add []string) []string {
	if len(rm) == 0 && len(add) == 0 {
		return cur
	}
	gone := map[string]bool{}
	for _, r := range rm {
		if t, err := volumeTarget(r); err == nil {
			gone[t] = true
		}
	}
	out := slices.DeleteFunc(slices.Clone(cur), func(v string) bool { return gone[targetOf(v)] })
	for _, a := range add {
		i := slices.IndexFunc(out, func(v string) bool { return targetOf(v) == targetOf(a) })
		if i >= 0 {
			out[i] = a
		} else {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Unmatched are the removals of e that name a setting none of cs has
// ("volumes_rm /nope", "labels_rm team"), in e's order: a replace that
// would remove nothing anywhere is refused as a typo (a new user's trial:
// --volume-rm /nope said "no setting changes", exit 0). A removal that
// matches on some of cs only is fine: the instances of a service may
// differ.
func (e ContainerEdit) Unmatched(cs []Container) []string {
	var out []string
	has := func(f func(Container) bool) bool { return slices.ContainsFunc(cs, f) }
	for _, r := range e.VolumesRm {
		t, err := volumeTarget(r)
		if err == nil && !has(func(c Container) bool {
			return slices.ContainsFunc(c.Volumes, func(v string) bool { return targetOf(v) == t })
		}) {
			out = append(out, "volumes_rm "+r)
		}
	}
	for _, l := range []struct {
		key string
		rm  []string
		of  func(Container) map[string]string
	}{{"labels_rm", e.LabelsRm, func(c Container) map[string]string { return c.Labels }},
		{"log_opts_rm", e.LogOptsRm, func(c Container) map[string]string { return c.LogOpts }}} {
		for _, k := range l.rm {
			if !has(func(c Container) bool { _, ok := l.of(c)[k]; return ok }) {
				out = append(out, l.key+" "+k)
			}
		}
	}
	for _, l := range []struct {
		key string
		rm  []string
		of  func(Container) []string
	}{{"cap_add_rm", e.CapAddRm, func(c Container) []string { return c.CapAdd }},
		{"cap_drop_rm", e.CapDropRm, func(c Container) []string { return c.CapDrop }}} {
		for _, name := range l.rm {
			want, _ := Capability(name)
			if !has(func(c Container) bool {
				return slices.ContainsFunc(l.of(c), func(s string) bool { got, _ := Capability(s); return got == want })
			}) {
				out = append(out, l.key+" "+name)
			}
		}
	}
	return out
}

// editMap is cur less rm's keys, then with set's entries.
func editMap(cur map[string]string, rm []string, set map[string]string) map[string]string {
	if len(rm) == 0 && len(set) == 0 {
		return cur
	}
	out := maps.Clone(cur)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range rm {
		delete(out, k)
	}
	maps.Copy(out, set)
	if len(out) == 0 {
		return nil
	}
	return out
}

// editCaps is cur less rm's capabilities, then with add's it lacks
// (names compared with CAP_ optional).
func editCaps(cur, rm, add []string) []string {
	if len(rm) == 0 && len(add) == 0 {
		return cur
	}
	canon := func(s string) string {
		if c, ok := Capability(s); ok {
			return c
		}
		return s
	}
	gone := map[string]bool{}
	for _, r := range rm {
		gone[canon(r)] = true
	}
	out := slices.DeleteFunc(slices.Clone(cur), func(s string) bool { return gone[canon(s)] })
	for _, a := range add {
		if !slices.ContainsFunc(out, func(s string) bool { return canon(s) == canon(a) }) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// SpecChanges lists what a replace from old to new changes, setting by
// setting, as "KEY OLD → NEW", "KEY ENTRY added" or "KEY ENTRY removed",
// with the keys the files spell (image, volumes, restart, labels, …).
// Env, network and ports are a deploy's and not compared. Nil: no change.
func SpecChanges(old, new Spec) []string {
	var out []string
	scalar := func(key, a, b, none string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %s → %s", key, orNone(a, none), orNone(b, none)))
		}
	}
	scalar("image", old.Image, new.Image, "(none)")
	if !slices.Equal(old.Command, new.Command) {
		out = append(out, fmt.Sprintf("command %q → %q", old.Command, new.Command))
	}
	if !healthEqual(old.Health, new.Health) {
		out = append(out, fmt.Sprintf("health %s → %s", healthLine(old.Health), healthLine(new.Health)))
	}
	scalar("pull", old.Pull, new.Pull, "missing")
	return append(out, ContainerChanges(old.Container, new.Container)...)
}

// ContainerChanges lists what changes from old to new, setting by setting
// (see SpecChanges); volumes are compared by container path.
func ContainerChanges(old, new Container) []string {
	var out []string
	scalar := func(key, a, b, none string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %s → %s", key, orNone(a, none), orNone(b, none)))
		}
	}
	out = append(out, volumeChanges(old.Volumes, new.Volumes)...)
	scalar("restart", old.Restart, new.Restart, "no")
	out = append(out, mapChanges("labels", old.Labels, new.Labels)...)
	scalar("user", old.User, new.User, "(the image's)")
	scalar("workdir", old.Workdir, new.Workdir, "(the image's)")
	if old.ReadOnly != new.ReadOnly {
		out = append(out, fmt.Sprintf("read_only %t → %t", old.ReadOnly, new.ReadOnly))
	}
	out = append(out, listChanges("cap_add", old.CapAdd, new.CapAdd)...)
	out = append(out, listChanges("cap_drop", old.CapDrop, new.CapDrop)...)
	scalar("log_driver", old.LogDriver, new.LogDriver, "(the engine's)")
	return append(out, mapChanges("log_opts", old.LogOpts, new.LogOpts)...)
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// volumeChanges compares volumes by container path, in path order.
func volumeChanges(old, new []string) []string {
	byTarget := func(list []string) map[string]string {
		m := make(map[string]string, len(list))
		for _, v := range list {
			m[targetOf(v)] = v
		}
		return m
	}
	o, n := byTarget(old), byTarget(new)
	var out []string
	for _, t := range slices.Sorted(maps.Keys(o)) {
		switch nv, ok := n[t]; {
		case !ok:
			out = append(out, fmt.Sprintf("volumes %s removed", o[t]))
		case nv != o[t]:
			out = append(out, fmt.Sprintf("volumes %s → %s", o[t], nv))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(n)) {
		if _, ok := o[t]; !ok {
			out = append(out, fmt.Sprintf("volumes %s added", n[t]))
		}
	}
	return out
}

// mapChanges compares KEY=VALUE settings key by key, in key order.
func mapChanges(key string, old, new map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(old)) {
		switch nv, ok := new[k]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s removed", key, k))
		case nv != old[k]:
			out = append(out, fmt.Sprintf("%s %s: %q → %q", key, k, old[k], nv))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(new)) {
		if _, ok := old[k]; !ok {
			out = append(out, fmt.Sprintf("%s %s=%q added", key, k, new[k]))
		}
	}
	return out
}

// listChanges compares lists as sets, in order of their entries.
func listChanges(key string, old, new []string) []string {
	var out []string
	for _, s := range old {
		if !slices.Contains(new, s) {
			out = append(out, fmt.Sprintf("%s %s removed", key, s))
		}
	}
	for _, s := range new {
		if !slices.Contains(old, s) {
			out = append(out, fmt.Sprintf("%s %s added", key, s))
		}
	}
	return out
}

func healthEqual(a, b *HealthCheck) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.Exec, b.Exec) && a.TCP == b.TCP && a.HTTP == b.HTTP && a.Timeout == b.Timeout && a.Port == b.Port
}

func healthLine(h *HealthCheck) string {
	switch {
	case h == nil:
		return "(none)"
	case len(h.Exec) > 0:
		return fmt.Sprintf("exec %q", h.Exec)
	case h.HTTP != "":
		return "http " + h.HTTP
	case h.TCP != 0:
		return fmt.Sprintf("tcp %d", h.TCP)
	case h.Port != "":
		return "port " + h.Port
	}
	return "(set)"
}

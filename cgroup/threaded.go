package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ThreadedControllers are the controllers ApplyThreaded enables for a
// group's threaded children: both are threaded controllers, so the kernel
// allows them in a group that holds processes (a container's cgroup), and
// memory, a domain controller, is never enabled there.
var ThreadedControllers = []string{"cpu", "cpuset"}

// ThreadedError is a step of making, filling or removing a threaded group
// that the kernel refused: the group, the file, the value written, and why.
type ThreadedError struct {
	Path, File, Value string
	Err               error
}

func (e *ThreadedError) Error() string {
	return fmt.Sprintf("cgroup: threaded group: write %s/%s = %q: %v", orRoot(e.Path), e.File, e.Value, e.Err)
}

func (e *ThreadedError) Unwrap() error { return e.Err }

// Dir is p's parent group ("" for a group at the top of the mount, and for
// the root itself).
func (p Path) Dir() Path {
	i := strings.LastIndexByte(p.p, '/')
	if i < 0 {
		return Path{}
	}
	return Path{p: p.p[:i]}
}

// ApplyThreaded makes s.Path a threaded child of its parent group and
// applies s to it as Apply does. The parent must exist (a container's
// cgroup: the manager need not own it) and must not be the root. In order:
//  1. validate s (no memory files: memory is a domain controller, a
//     threaded group has none) before anything is written;
//  2. create the child if missing, and write "threaded" to its cgroup.type
//     unless it reads so (the parent becomes "domain threaded", the root
//     of a threaded subtree: it may keep its processes);
//  3. enable ThreadedControllers in the parent's cgroup.subtree_control
//     where missing (allowed with processes in the parent, as both are
//     threaded controllers);
//  4. Apply(s).
//
// A failed step undoes the earlier ones (the child is removed if this call
// created it, the controllers it enabled are disabled again), except that a
// child that became threaded stays so (the kernel cannot turn it back).
// It is idempotent.
func (m *Manager) ApplyThreaded(ctx context.Context, s Spec) error {
	parent := s.Path.Dir()
	if s.Path.IsRoot() || parent.IsRoot() {
		return &SpecError{Path: s.Path.String(), File: "cgroup.type", Value: "threaded",
			Reason: "a threaded group needs a parent group below the root (a container's cgroup)"}
	}
	if s.MemoryMax != nil || s.MemoryHigh != nil || s.MemoryLow != nil || s.MemorySwapMax != nil || s.MemoryOOMGroup != nil {
		return &SpecError{Path: s.Path.String(), File: "memory.*", Value: "",
			Reason: "memory is a domain controller: a threaded group has no memory files"}
	}
	if _, err := m.plan(s); err != nil {
		return err
	}
	if !m.Exists(parent) {
		return fmt.Errorf("cgroup: threaded group %s: parent %s: %w", s.Path, parent, ErrNoGroup)
	}
	created := false
	if !m.Exists(s.Path) {
		if err := m.mkdirGroup(s.Path); err != nil {
			return &ThreadedError{Path: s.Path.String(), File: "", Value: "mkdir", Err: err}
		}
		created = true
	}
	var enabled []string
	undo := func() {
		if len(enabled) > 0 {
			v := "-" + strings.Join(enabled, " -")
			if err := m.write(parent, "cgroup.subtree_control", v); err != nil {
				m.log.Warn("cgroup rollback failed", "cgroup", parent.String(), "file", "cgroup.subtree_control", "value", v, "err", err)
			}
		}
		if created {
			if err := m.rmdirGroup(s.Path); err != nil {
				m.log.Warn("cgroup rollback failed", "cgroup", s.Path.String(), "err", err)
			}
		}
	}
	typ, err := m.read(s.Path, "cgroup.type")
	if err != nil {
		undo()
		return err
	}
	if typ != "threaded" {
		if err := m.write(s.Path, "cgroup.type", "threaded"); err != nil {
			undo()
			return &ThreadedError{Path: s.Path.String(), File: "cgroup.type", Value: "threaded", Err: errnoOf(err)}
		}
	}
	on, err := m.read(parent, "cgroup.subtree_control")
	if err != nil {
		undo()
		return err
	}
	have := strings.Fields(strings.ReplaceAll(on, "+", "")) // a fake tree holds what was written
	for _, c := range ThreadedControllers {
		if !slices.Contains(have, c) {
			enabled = append(enabled, c)
		}
	}
	if len(enabled) > 0 {
		v := "+" + strings.Join(enabled, " +")
		if err := m.write(parent, "cgroup.subtree_control", v); err != nil {
			enabled = nil
			undo()
			return &ThreadedError{Path: parent.String(), File: "cgroup.subtree_control", Value: v, Err: errnoOf(err)}
		}
	}
	if err := m.Apply(ctx, s); err != nil {
		undo()
		return err
	}
	if created || len(enabled) > 0 {
		m.log.Debug("threaded group made", "cgroup", s.Path.String(), "enabled", enabled)
	}
	return nil
}

// MoveThread moves thread tid into group p (a write to its cgroup.threads;
// the kernel allows it only within one threaded subtree).
func (m *Manager) MoveThread(p Path, tid int) error {
	if tid <= 0 {
		return &ThreadedError{Path: p.String(), File: "cgroup.threads", Value: strconv.Itoa(tid), Err: errors.New("not a thread id")}
	}
	if err := m.write(p, "cgroup.threads", strconv.Itoa(tid)); err != nil {
		return &ThreadedError{Path: p.String(), File: "cgroup.threads", Value: strconv.Itoa(tid), Err: errnoOf(err)}
	}
	return nil
}

// Threads returns the thread IDs in group p itself (cgroup.threads; not
// those of its children), in the kernel's order.
func (m *Manager) Threads(p Path) ([]int, error) {
	s, err := m.read(p, "cgroup.threads")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(s) {
		tid, err := strconv.Atoi(f)
		if err != nil || tid <= 0 {
			return nil, fmt.Errorf("cgroup: read %s: %q is not a thread id", p.file("cgroup.threads"), f)
		}
		out = append(out, tid)
	}
	return out, nil
}

// Type returns group p's cgroup.type: "domain", "domain threaded",
// "domain invalid" or "threaded".
func (m *Manager) Type(p Path) (string, error) { return m.read(p, "cgroup.type") }

// RemoveThreaded removes threaded group p, which must hold no threads
// (move them out with MoveThread first: the kernel refuses, EBUSY, and
// RemoveThreaded says which remain). A missing group is not an error.
// When p was its parent's last child, the ThreadedControllers are turned
// off in the parent's cgroup.subtree_control again: a group with processes
// and a threaded controller on for its children stays a thread root
// ("domain threaded") without any child, and a group its own processes
// make then is "domain invalid" (a container's systemd, Docker in Docker).
func (m *Manager) RemoveThreaded(ctx context.Context, p Path) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !m.Exists(p) {
		return nil
	}
	if typ, err := m.read(p, "cgroup.type"); err != nil {
		return err
	} else if typ != "threaded" {
		return &ThreadedError{Path: p.String(), File: "cgroup.type", Value: "", Err: fmt.Errorf("is %q, not threaded: not pinfold's to remove", typ)}
	}
	if tids, err := m.Threads(p); err == nil && len(tids) > 0 {
		return &ThreadedError{Path: p.String(), File: "", Value: "rmdir", Err: fmt.Errorf("%w: threads %v still in it", syscall.EBUSY, tids)}
	}
	if err := m.rmdirGroup(p); err != nil {
		return &ThreadedError{Path: p.String(), File: "", Value: "rmdir", Err: err}
	}
	return m.unthread(p.Dir())
}

// unthread turns ThreadedControllers off in parent's cgroup.subtree_control
// when parent has no child group left.
func (m *Manager) unthread(parent Path) error {
	if parent.IsRoot() {
		return nil
	}
	d, err := m.root.Open(parent.String())
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return nil // another child: its controllers stay
		}
	}
	on, err := m.read(parent, "cgroup.subtree_control")
	if err != nil {
		return err
	}
	have := strings.Fields(strings.ReplaceAll(on, "+", ""))
	var off []string
	for _, c := range ThreadedControllers {
		if slices.Contains(have, c) {
			off = append(off, "-"+c)
		}
	}
	if len(off) == 0 {
		return nil
	}
	v := strings.Join(off, " ")
	if err := m.write(parent, "cgroup.subtree_control", v); err != nil {
		return &ThreadedError{Path: parent.String(), File: "cgroup.subtree_control", Value: v, Err: errnoOf(err)}
	}
	return nil
}

// mkdirGroup creates group p (a real kernel fills it with interface files;
// on a fake tree, WithFakeGroups does).
func (m *Manager) mkdirGroup(p Path) error {
	if err := m.root.Mkdir(p.String(), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if !m.fakeGroups {
		return nil
	}
	for _, f := range fakeGroupFiles {
		if err := m.root.WriteFile(p.file(f.File), []byte(f.Value+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// rmdirGroup removes the empty group p.
func (m *Manager) rmdirGroup(p Path) error {
	if m.fakeGroups {
		for _, f := range fakeGroupFiles {
			if err := m.root.Remove(p.file(f.File)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return m.root.Remove(p.String())
}

// fakeGroupFiles are the files of a fresh child group on a Linux 6.x
// kernel with cpu and cpuset enabled for it, as WithFakeGroups makes them.
var fakeGroupFiles = []Write{
	{"cgroup.type", "domain"}, {"cgroup.threads", ""}, {"cgroup.procs", ""}, {"cgroup.subtree_control", ""},
	{"cgroup.controllers", "cpuset cpu"}, {"cgroup.events", "populated 0\nfrozen 0"},
	{"cpuset.cpus", ""}, {"cpuset.mems", ""}, {"cpuset.cpus.effective", ""}, {"cpuset.mems.effective", ""},
	{"cpu.max", "max 100000"}, {"cpu.max.burst", "0"}, {"cpu.weight", "100"},
	{"cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0"},
}

// WithFakeGroups makes a group the Manager creates on a fake tree (plain
// directories and files) get the interface files a kernel would make,
// and removing it remove them. Tests only.
func WithFakeGroups() Option { return func(m *Manager) { m.fakeGroups = true } }

// errnoOf is err's errno when it has one (the kernel's refusal, without
// the open/write wrapping the path is named in already), else err.
func errnoOf(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3/cgroup2"

	"github.com/pinfold/pinfold/planner/cpuset"
)

// Controllers pinfold enables for the groups it owns.
var Controllers = []string{"cpu", "cpuset", "memory", "pids"}

// Manager writes cgroup v2 interface files below one mount point and owns
// the subtree Parent. All file access goes through an *os.Root, so a path
// can never leave the mount.
type Manager struct {
	dir    string
	root   *os.Root
	parent Path
	// cpus and mems are the root's effective sets: a Spec may not name
	// CPUs or NUMA nodes outside them.
	cpus cpuset.CPUs
	mems cpuset.Mems
	log  *slog.Logger
	// fault, when set, is asked before each resource write and may refuse
	// it, as the kernel would (tests only: WithFaultInjection).
	fault func(file, value string) error
	// stored, when set, is what a fake tree stores for a write, as a kernel
	// that rounds or clamps would (tests only: WithStoredValue).
	stored func(file, value string) string
	// fakeGroups: groups made here get interface files (tests only:
	// WithFakeGroups).
	fakeGroups bool
}

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithFaultInjection makes Apply consult f before every resource write; an
// error from f is treated as the kernel refusing the write. For tests of
// the rollback path on fake trees.
func WithFaultInjection(f func(file, value string) error) Option {
	return func(m *Manager) { m.fault = f }
}

// WithStoredValue makes Apply write f(file, value) where it meant value,
// as a kernel that rounds or silently clamps would, so tests on fake trees
// can prove the read-back catches it.
func WithStoredValue(f func(file, value string) string) Option {
	return func(m *Manager) { m.stored = f }
}

// Open returns a Manager for the cgroup2 tree mounted at dir that owns
// parent (e.g. "pinfold"): it checks the root has the controllers pinfold
// needs, creates parent, and enables the controllers in cgroup.subtree_control
// from the root down to parent. With parent "" it owns no subtree: it
// creates and removes nothing and writes only groups that exist (the node
// agent's case: containers' cgroups, made by their runtime). It does not
// check dir is a cgroup2 mount; OpenHost does. Open is idempotent.
func Open(dir, parent string, opts ...Option) (*Manager, error) {
	p, err := ParsePath(parent)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open mount %s: %w", dir, err)
	}
	m := &Manager{dir: dir, root: root, parent: p, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(m)
	}
	if err := m.init(); err != nil {
		root.Close()
		return nil, err
	}
	return m, nil
}

func (m *Manager) init() error {
	have, err := m.read(Path{}, "cgroup.controllers")
	if err != nil {
		return err
	}
	for _, c := range Controllers {
		if !slices.Contains(strings.Fields(have), c) {
			return fmt.Errorf("cgroup: controller %q is not available at %s (cgroup.controllers: %q)", c, m.dir, have)
		}
	}
	cpus, err := m.read(Path{}, "cpuset.cpus.effective")
	if err != nil {
		return err
	}
	if m.cpus, err = cpuset.ParseCPUs(cpus); err != nil {
		return fmt.Errorf("cgroup: %s/cpuset.cpus.effective: %w", m.dir, err)
	}
	mems, err := m.read(Path{}, "cpuset.mems.effective")
	if err != nil {
		return err
	}
	if m.mems, err = cpuset.ParseMems(mems); err != nil {
		return fmt.Errorf("cgroup: %s/cpuset.mems.effective: %w", m.dir, err)
	}
	if m.parent.IsRoot() {
		m.log.Debug("cgroup tree ready; no subtree owned", "cpus", m.cpus, "mems", m.mems)
		return nil
	}
	for _, a := range m.parent.ancestors() {
		if !a.IsRoot() {
			if err := m.root.Mkdir(a.String(), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cgroup: create %s: %w", a, err)
			}
		}
		if err := m.enable(a); err != nil {
			return err
		}
	}
	m.log.Debug("cgroup subtree ready", "cgroup", m.parent.String(), "cpus", m.cpus, "mems", m.mems)
	return nil
}

// enable turns on the controllers for p's children that are not on yet.
func (m *Manager) enable(p Path) error {
	on, err := m.read(p, "cgroup.subtree_control")
	if err != nil {
		return err
	}
	var add []string
	for _, c := range Controllers {
		if !slices.Contains(strings.Fields(on), c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return m.write(p, "cgroup.subtree_control", strings.Join(add, " "))
}

// Close releases the mount handle.
func (m *Manager) Close() error { return m.root.Close() }

// Parent is the subtree the Manager owns.
func (m *Manager) Parent() Path { return m.parent }

// HostCPUs and HostMems are the CPUs and NUMA nodes a Spec may use.
func (m *Manager) HostCPUs() cpuset.CPUs { return m.cpus }
func (m *Manager) HostMems() cpuset.Mems { return m.mems }

// Exists reports whether group p exists.
func (m *Manager) Exists(p Path) bool {
	st, err := m.root.Stat(orDot(p))
	return err == nil && st.IsDir()
}

func orDot(p Path) string {
	if p.IsRoot() {
		return "."
	}
	return p.String()
}

// ApplyError is a write the kernel refused; Apply restored what it had
// written before it.
type ApplyError struct {
	Path, File, Value string
	Err               error
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("cgroup: write %s/%s = %q: %v (earlier writes were rolled back)", orRoot(e.Path), e.File, e.Value, e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// ErrNoGroup is returned for a group that does not exist outside the owned subtree.
var ErrNoGroup = errors.New("no such cgroup")

// Apply makes group s.Path match s. A group below the owned parent is
// created when missing; any other group must exist (a container's cgroup,
// created by its runtime). Everything is validated before the first write,
// and a refused write rolls back the earlier ones (and the group, if Apply
// created it). Apply is idempotent: files that already hold the value are
// not written. It checks ctx between writes; one write cannot be cancelled.
func (m *Manager) Apply(ctx context.Context, s Spec) error {
	writes, err := m.plan(s)
	if err != nil {
		return err
	}
	created := false
	if !m.Exists(s.Path) {
		if !m.owns(s.Path) {
			return fmt.Errorf("cgroup: %s: %w (only groups below an owned subtree are created; this manager owns %s)", s.Path, ErrNoGroup, m.owned())
		}
		if err := m.create(s.Path); err != nil {
			return err
		}
		created = true
	}
	type done struct{ w, old Write }
	var applied []done
	rollback := func() {
		for i := len(applied) - 1; i >= 0; i-- {
			if err := m.write(s.Path, applied[i].old.File, applied[i].old.Value); err != nil {
				m.log.Warn("cgroup rollback failed", "cgroup", s.Path.String(), "file", applied[i].old.File, "err", err)
			}
		}
		if created {
			_ = m.root.Remove(s.Path.String())
		}
	}
	for i := 0; i < len(writes); i++ {
		if err := ctx.Err(); err != nil {
			rollback()
			return fmt.Errorf("cgroup: apply %s: %w", s.Path, err)
		}
		w := writes[i]
		old, err := m.read(s.Path, w.File)
		if err != nil {
			rollback()
			return err
		}
		if holds(w, old) {
			continue
		}
		err = m.writeOne(s.Path, w)
		// A quota below the current burst is refused until the burst drops:
		// write the burst first, then the quota.
		if err != nil && w.File == "cpu.max" && errors.Is(err, syscall.EINVAL) && i+1 < len(writes) && writes[i+1].File == "cpu.max.burst" {
			writes[i], writes[i+1] = writes[i+1], writes[i]
			i--
			continue
		}
		if err != nil {
			rollback()
			var errno syscall.Errno
			if errors.As(err, &errno) {
				err = errno
			}
			return &ApplyError{Path: s.Path.String(), File: w.File, Value: w.Value, Err: err}
		}
		applied = append(applied, done{w: w, old: Write{w.File, old}})
		// Read back: a value the kernel took but holds otherwise (clamped,
		// or changed under us) is a refusal too.
		got, err := m.read(s.Path, w.File)
		if err == nil && !holds(w, got) {
			err = fmt.Errorf("%w: reads back %q", ErrReadBack, got)
		}
		if err != nil {
			rollback()
			return &ApplyError{Path: s.Path.String(), File: w.File, Value: w.Value, Err: err}
		}
	}
	if len(applied) > 0 {
		m.log.Debug("cgroup applied", "cgroup", s.Path.String(), "writes", len(applied))
	}
	return nil
}

// plan is Plan(s) checked against this host: its CPUs and NUMA nodes, and
// never the root group.
func (m *Manager) plan(s Spec) ([]Write, error) {
	writes, err := Plan(s)
	if err != nil {
		return nil, err
	}
	switch {
	case s.CPUs != nil && !s.CPUs.IsSubsetOf(m.cpus):
		return nil, &SpecError{Path: s.Path.String(), File: "cpuset.cpus", Value: s.CPUs.String(),
			Reason: fmt.Sprintf("CPUs %s are not on this host (it has %s)", s.CPUs.Difference(m.cpus), m.cpus)}
	case s.Mems != nil && !s.Mems.IsSubsetOf(m.mems):
		return nil, &SpecError{Path: s.Path.String(), File: "cpuset.mems", Value: s.Mems.String(),
			Reason: fmt.Sprintf("NUMA nodes %s are not on this host (it has %s)", s.Mems.Difference(m.mems), m.mems)}
	case s.Path.IsRoot():
		return nil, &SpecError{Path: "", File: "", Value: "", Reason: "the root cgroup's resources are not pinfold's to set"}
	}
	return writes, nil
}

// writeOne performs one planned write (asking the fault injector first,
// and storing what a fake kernel would, in tests).
func (m *Manager) writeOne(p Path, w Write) error {
	if m.fault != nil {
		if err := m.fault(p.file(w.File), w.Value); err != nil {
			return err
		}
	}
	stored := w.Value
	if m.stored != nil {
		stored = m.stored(p.file(w.File), w.Value)
	}
	return m.write(p, w.File, stored)
}

// owns reports whether p lies strictly below the owned subtree.
func (m *Manager) owns(p Path) bool {
	return !m.parent.IsRoot() && p.Within(m.parent) && p != m.parent
}

func (m *Manager) owned() string {
	if m.parent.IsRoot() {
		return "no subtree"
	}
	return m.parent.String()
}

// ErrReadBack is a write the kernel accepted but that does not read back
// as written.
var ErrReadBack = errors.New("written value does not read back")

// holds reports whether an interface file that reads got holds what w
// writes: the same sets for cpusets, the same quota and period for cpu.max,
// the value rounded down to whole pages for memory limits (the kernel
// stores them so), else the same text.
func holds(w Write, got string) bool {
	switch {
	case got == w.Value:
		return true
	case w.File == "cpuset.cpus":
		a, err1 := cpuset.ParseCPUs(w.Value)
		b, err2 := cpuset.ParseCPUs(got)
		return err1 == nil && err2 == nil && a.Equal(b)
	case w.File == "cpuset.mems":
		a, err1 := cpuset.ParseMems(w.Value)
		b, err2 := cpuset.ParseMems(got)
		return err1 == nil && err2 == nil && a.Equal(b)
	case w.File == "cpu.max":
		return normalizeCPUMax(got) == w.Value
	case strings.HasPrefix(w.File, "memory.") && w.File != "memory.oom.group":
		want, err1 := strconv.ParseInt(w.Value, 10, 64)
		have, err2 := strconv.ParseInt(got, 10, 64)
		page := int64(os.Getpagesize())
		return err1 == nil && err2 == nil && have == want-want%page
	}
	return false
}

// normalizeCPUMax turns the kernel's "max 100000" / "50000 100000" into the
// form Plan writes (identical today; kept for kernels that print otherwise).
func normalizeCPUMax(s string) string { return strings.Join(strings.Fields(s), " ") }

// create makes p and any missing groups between the owned parent and p,
// enabling controllers in each new intermediate group.
func (m *Manager) create(p Path) error {
	for _, a := range p.ancestors() {
		if !a.Within(m.parent) || a == m.parent || m.Exists(a) {
			continue
		}
		if err := m.root.Mkdir(a.String(), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup: create %s: %w", a, err)
		}
		if a != p {
			if err := m.enable(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove deletes group p, which must lie below the owned parent and hold no
// processes (groups below it are removed too).
func (m *Manager) Remove(ctx context.Context, p Path) error {
	if !m.owns(p) {
		return fmt.Errorf("cgroup: remove %s: not below the owned subtree (this manager owns %s)", p, m.owned())
	}
	if !m.Exists(p) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g, err := cgroup2.Load("/"+p.String(), cgroup2.WithMountpoint(m.dir))
	if err != nil {
		return fmt.Errorf("cgroup: remove %s: %w", p, err)
	}
	if err := g.Delete(); err != nil {
		return fmt.Errorf("cgroup: remove %s: %w", p, err)
	}
	return nil
}

// AddProc moves process pid into group p.
func (m *Manager) AddProc(p Path, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: add pid %d to %s: not a process id", pid, p)
	}
	return m.write(p, "cgroup.procs", strconv.Itoa(pid))
}

// Read returns the trimmed content of interface file name of group p.
func (m *Manager) Read(p Path, name string) (string, error) {
	if strings.ContainsAny(name, "/") || name == "" || name == "." || name == ".." {
		return "", fmt.Errorf("cgroup: read %q: not an interface file name", name)
	}
	return m.read(p, name)
}

func (m *Manager) read(p Path, name string) (string, error) {
	f, err := m.root.Open(p.file(name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !m.Exists(p) {
			return "", fmt.Errorf("cgroup: %s: %w", orRoot(p.String()), ErrNoGroup)
		}
		return "", fmt.Errorf("cgroup: read %s: %w", p.file(name), errors.Unwrap(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return "", fmt.Errorf("cgroup: read %s: %w", p.file(name), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// write opens an existing interface file (never O_CREATE) and writes value
// with a single, blocking write(2).
func (m *Manager) write(p Path, name, value string) error {
	f, err := m.openWrite(p, name)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write([]byte(value)); err != nil {
		return fmt.Errorf("cgroup: write %s = %q: %w", p.file(name), value, err)
	}
	return nil
}

// openWrite opens interface file name of p for writing, in blocking mode.
//
// Blocking matters: cgroup files can be polled, so Go registers them with
// its poller and sets O_NONBLOCK on them, and newer kernels (upstream
// since 2025) make a write to memory.high or memory.max on an O_NONBLOCK
// file only set the limit, skipping the reclaim that brings the group down
// to it. A memory shrink then waits for a reclaim that never comes: on
// Linux 6.18, 96 MiB of clean page cache stayed at 102 MiB for a whole
// minute (TestKernelMemoryShrink, run natively on 2026-11-26). File.Fd puts
// the descriptor back into blocking mode.
func (m *Manager) openWrite(p Path, name string) (*os.File, error) {
	f, err := m.root.OpenFile(p.file(name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", p.file(name), err)
	}
	f.Fd()
	return f, nil
}

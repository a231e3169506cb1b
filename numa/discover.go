package numa

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
)

const (
	cpuDir  = "devices/system/cpu"
	nodeDir = "devices/system/node"
	// maxFileSize bounds every read: sysfs attributes are at most a page.
	maxFileSize = 64 << 10
)

// FileError is a problem with one file of the tree: missing, unreadable or
// holding a bad value.
type FileError struct {
	File  string // path relative to the sysfs (or procfs) root
	Value string // the offending content, cut to 80 bytes; "" when unreadable
	Err   error
}

func (e *FileError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("numa: %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("numa: %s: bad value %q: %v", e.File, e.Value, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// Discover reads the topology from the sysfs tree sys. proc is the procfs tree
// (production: os.DirFS("/proc")); it is read only for a host without
// devices/system/node, and may be nil otherwise.
func Discover(sys, proc fs.FS) (*topology.Topology, error) {
	d := discoverer{sys: sys}
	online, err := d.readSet(path.Join(cpuDir, "online"), true)
	if err != nil {
		return nil, err
	}
	if online.IsEmpty() {
		return nil, &FileError{File: path.Join(cpuDir, "online"), Err: errors.New("no online CPUs")}
	}
	isolated, err := d.readSet(path.Join(cpuDir, "isolated"), false)
	if err != nil {
		return nil, err
	}
	t := &topology.Topology{Online: online, Isolated: isolated.Intersect(online)}

	if err := d.nodes(t, proc); err != nil {
		return nil, err
	}
	nodeOf := map[cpuset.CPUID]cpuset.NUMANodeID{}
	for _, n := range t.NUMANodes {
		for c := range n.CPUs.All() {
			nodeOf[c] = n.ID
		}
	}
	for id := range online.All() {
		c, err := d.cpu(id, online)
		if err != nil {
			return nil, err
		}
		n, ok := nodeOf[id]
		if !ok {
			return nil, &FileError{File: path.Join(nodeDir), Err: fmt.Errorf("online CPU %d is in no NUMA node's cpulist", id)}
		}
		c.NUMANode = n
		t.CPUs = append(t.CPUs, c)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("numa: discovered topology is inconsistent: %w", err)
	}
	return t, nil
}

type discoverer struct{ sys fs.FS }

// read returns the trimmed content of a file. A missing optional file gives
// ("", false, nil).
func read(fsys fs.FS, name string, required bool) (string, bool, error) {
	f, err := fsys.Open(name)
	if err != nil {
		if !required && errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, &FileError{File: name, Err: unwrapPathError(err)}
	}
	defer f.Close()
	b := make([]byte, maxFileSize+1)
	n, err := readFull(f, b)
	if err != nil {
		return "", false, &FileError{File: name, Err: unwrapPathError(err)}
	}
	if n > maxFileSize {
		return "", false, &FileError{File: name, Err: fmt.Errorf("larger than %d bytes", maxFileSize)}
	}
	return strings.TrimSpace(string(b[:n])), true, nil
}

func readFull(f fs.File, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		if m == 0 {
			return n, nil
		}
	}
	return n, nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (d discoverer) readSet(name string, required bool) (cpuset.CPUs, error) {
	s, ok, err := read(d.sys, name, required)
	if err != nil || !ok {
		return cpuset.CPUs{}, err
	}
	set, err := cpuset.ParseCPUs(s)
	if err != nil {
		return cpuset.CPUs{}, &FileError{File: name, Value: clip.Text(s, 80), Err: err}
	}
	return set, nil
}

func (d discoverer) readInt(name string) (int, error) {
	s, _, err := read(d.sys, name, true)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n > 1<<20 {
		return 0, &FileError{File: name, Value: clip.Text(s, 80), Err: errors.New("want an integer from -1 to 1048576")}
	}
	return n, nil
}

// cpu reads one online CPU's topology and L3 cache group.
func (d discoverer) cpu(id cpuset.CPUID, online cpuset.CPUs) (topology.CPU, error) {
	dir := path.Join(cpuDir, fmt.Sprintf("cpu%d", id))
	c := topology.CPU{ID: id}
	var err error
	if c.PackageID, err = d.readInt(path.Join(dir, "topology/physical_package_id")); err != nil {
		return c, err
	}
	if c.CoreID, err = d.readInt(path.Join(dir, "topology/core_id")); err != nil {
		return c, err
	}
	// die_id appeared in Linux 5.2; older kernels have one die per package.
	if _, ok, _ := read(d.sys, path.Join(dir, "topology/die_id"), false); ok {
		if c.DieID, err = d.readInt(path.Join(dir, "topology/die_id")); err != nil {
			return c, err
		}
	}
	// core_cpus_list (Linux 5.7) replaces thread_siblings_list.
	sib := path.Join(dir, "topology/core_cpus_list")
	if _, ok, _ := read(d.sys, sib, false); !ok {
		sib = path.Join(dir, "topology/thread_siblings_list")
	}
	if c.Siblings, err = d.readSet(sib, true); err != nil {
		return c, err
	}
	if !c.Siblings.Contains(id) {
		return c, &FileError{File: sib, Value: c.Siblings.String(), Err: fmt.Errorf("does not contain CPU %d itself", id)}
	}
	c.Siblings = c.Siblings.Intersect(online)
	if c.L3, err = d.l3(dir); err != nil {
		return c, err
	}
	if !c.L3.IsEmpty() && !c.L3.Contains(id) {
		return c, &FileError{File: path.Join(dir, "cache"), Value: c.L3.String(), Err: fmt.Errorf("L3 shared_cpu_list does not contain CPU %d itself", id)}
	}
	c.L3 = c.L3.Intersect(online)
	return c, nil
}

var indexRE = regexp.MustCompile(`^index[0-9]+$`)

// l3 returns the CPUs sharing this CPU's level-3 cache; empty when unknown.
func (d discoverer) l3(cpuPath string) (cpuset.CPUs, error) {
	dir := path.Join(cpuPath, "cache")
	entries, err := fs.ReadDir(d.sys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return cpuset.CPUs{}, nil
	}
	if err != nil {
		return cpuset.CPUs{}, &FileError{File: dir, Err: unwrapPathError(err)}
	}
	for _, e := range entries {
		if !indexRE.MatchString(e.Name()) {
			continue
		}
		lvl := path.Join(dir, e.Name(), "level")
		s, ok, err := read(d.sys, lvl, false)
		if err != nil {
			return cpuset.CPUs{}, err
		}
		if !ok {
			continue
		}
		if _, err := strconv.Atoi(s); err != nil {
			return cpuset.CPUs{}, &FileError{File: lvl, Value: clip.Text(s, 80), Err: errors.New("not a cache level")}
		}
		if s != "3" {
			continue
		}
		return d.readSet(path.Join(dir, e.Name(), "shared_cpu_list"), true)
	}
	return cpuset.CPUs{}, nil
}

var nodeRE = regexp.MustCompile(`^node([0-9]+)$`)

// nodes fills t.NUMANodes from devices/system/node, or the flat fallback.
func (d discoverer) nodes(t *topology.Topology, proc fs.FS) error {
	entries, err := fs.ReadDir(d.sys, nodeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return flat(t, proc)
	}
	if err != nil {
		return &FileError{File: nodeDir, Err: unwrapPathError(err)}
	}
	var ids []cpuset.NUMANodeID
	for _, e := range entries {
		m := nodeRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil || n > cpuset.MaxID {
			return &FileError{File: path.Join(nodeDir, e.Name()), Err: fmt.Errorf("NUMA node id above %d", cpuset.MaxID)}
		}
		ids = append(ids, cpuset.NUMANodeID(n))
	}
	if len(ids) == 0 {
		return flat(t, proc)
	}
	slices.Sort(ids)
	// The distance file has one column per *online* node, in ascending ID order.
	columns := cpuset.Of(ids...)
	onlineName := path.Join(nodeDir, "online")
	if s, ok, err := read(d.sys, onlineName, false); err != nil {
		return err
	} else if ok {
		if columns, err = cpuset.ParseMems(s); err != nil {
			return &FileError{File: onlineName, Value: clip.Text(s, 80), Err: err}
		}
	}
	t.NUMASource = topology.SourceSysfs
	for _, id := range ids {
		if !columns.Contains(id) {
			continue // an offline node has no memory or CPUs to plan on
		}
		dir := path.Join(nodeDir, fmt.Sprintf("node%d", id))
		n := topology.NUMANode{ID: id}
		cpus, err := d.readSet(path.Join(dir, "cpulist"), true)
		if err != nil {
			return err
		}
		n.CPUs = cpus.Intersect(t.Online)
		if n.MemoryBytes, err = memTotal(d.sys, path.Join(dir, "meminfo"), fmt.Sprintf("Node %d MemTotal:", id)); err != nil {
			return err
		}
		if n.Distances, err = d.distances(path.Join(dir, "distance"), columns); err != nil {
			return err
		}
		t.NUMANodes = append(t.NUMANodes, n)
	}
	slices.SortFunc(t.NUMANodes, func(a, b topology.NUMANode) int { return cmp.Compare(a.ID, b.ID) })
	return nil
}

// distances maps the i-th column of a node's distance file to the i-th online
// NUMA node ID: columns are positional, the result is keyed by ID.
func (d discoverer) distances(name string, columns cpuset.Mems) (map[cpuset.NUMANodeID]int, error) {
	s, _, err := read(d.sys, name, true)
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(s)
	ids := columns.Slice()
	if len(fields) != len(ids) {
		return nil, &FileError{File: name, Value: clip.Text(s, 80), Err: fmt.Errorf("%d distances for %d online NUMA nodes (%s)", len(fields), len(ids), columns)}
	}
	out := make(map[cpuset.NUMANodeID]int, len(ids))
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || v > 255 {
			return nil, &FileError{File: name, Value: clip.Text(s, 80), Err: fmt.Errorf("distance %q is not 0..255", f)}
		}
		out[ids[i]] = v
	}
	return out, nil
}

// flat builds the single NUMA node of a host without devices/system/node.
func flat(t *topology.Topology, proc fs.FS) error {
	if proc == nil {
		return &FileError{File: nodeDir, Err: errors.New("missing, and no procfs given to read MemTotal from")}
	}
	mem, err := memTotal(proc, "meminfo", "MemTotal:")
	if err != nil {
		return err
	}
	t.NUMASource = topology.SourceFlat
	t.NUMANodes = []topology.NUMANode{{ID: 0, CPUs: t.Online, MemoryBytes: mem,
		Distances: map[cpuset.NUMANodeID]int{0: topology.LocalDistance}}}
	return nil
}

// memTotal finds the line starting with prefix ("Node 0 MemTotal:" in a node's
// meminfo, "MemTotal:" in /proc/meminfo) and returns its kB value in bytes.
func memTotal(fsys fs.FS, name, prefix string) (int64, error) {
	s, _, err := read(fsys, name, true)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, &FileError{File: name, Value: clip.Text(line, 80), Err: errors.New(`want "<number> kB"`)}
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > (1<<53)/1024 {
			return 0, &FileError{File: name, Value: clip.Text(line, 80), Err: errors.New("not a plausible kB count")}
		}
		return kb * 1024, nil
	}
	return 0, &FileError{File: name, Err: fmt.Errorf("no %q line", prefix)}
}

package planfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
)

// Validate checks every field and builds the engine's and the placement
// rules' input.
func (f *File) Validate() (*Input, error) {
	in, err := f.params()
	if err != nil {
		return nil, err
	}
	if len(f.Hosts) == 0 {
		return nil, invalid("hosts", raw("[]"), "at least one host is required")
	}
	hb := newHostBuilder(in)
	for i := range f.Hosts {
		if err := hb.add(i, &f.Hosts[i]); err != nil {
			return nil, err
		}
	}
	if err := f.finish(in); err != nil {
		return nil, err
	}
	return in, nil
}

// params is the first step of Validate: the engine's parameters.
func (f *File) params() (*Input, error) {
	in := &Input{Params: alloc.DefaultParams()}
	if f.ShareBase != nil {
		in.Params.ShareBase = *f.ShareBase
	}
	if f.MaxFragmentCores != nil {
		in.Params.MaxFragmentCores = *f.MaxFragmentCores
	}
	if err := in.Params.Validate(); err != nil {
		return nil, err
	}
	return in, nil
}

// hostBuilder adds the file's hosts to an Input one at a time, in file
// order (the second step of Validate).
type hostBuilder struct {
	in   *Input
	seen map[string]bool
}

func newHostBuilder(in *Input) *hostBuilder { return &hostBuilder{in: in, seen: map[string]bool{}} }

// add builds hosts[i] and appends it; fh is not kept (the streaming
// decoder reuses it for the next host).
func (hb *hostBuilder) add(i int, fh *Host) error {
	h, err := fh.placementHost("hosts["+strconv.Itoa(i)+"]", hb.in.Params.ShareBase)
	if err != nil {
		return err
	}
	if hb.seen[h.Name] {
		return invalid(fmt.Sprintf("hosts[%d].name", i), h.Name, "duplicate host name")
	}
	hb.seen[h.Name] = true
	hb.in.Hosts = append(hb.in.Hosts, h)
	return nil
}

// finish is the last step of Validate: the settings, and the request or
// the resize.
func (f *File) finish(in *Input) error {
	if err := f.settings(in); err != nil {
		return err
	}
	switch {
	case f.Request == nil && f.Resize == nil:
		return invalid("request", raw("null"), "the file needs a request or a resize")
	case f.Request != nil && f.Resize != nil:
		return invalid("resize", raw("{…}"), "give a request or a resize, not both")
	case f.Request != nil:
		r, err := f.Request.build(in.Params)
		if err != nil {
			return err
		}
		in.Request = r
	default:
		engine := make([]*alloc.Host, len(in.Hosts))
		for i, h := range in.Hosts {
			engine[i] = h.Resources
		}
		rz, err := f.Resize.build(in.Params, engine)
		if err != nil {
			return err
		}
		in.Resize = rz
	}
	return nil
}

// settings are the cluster's placement settings in the file.
func (f *File) settings(in *Input) error {
	in.Settings = placement.Settings{Buffer: f.BufferPercent, Overbooking: f.OverbookingPercent}
	if len(f.ConstraintPriorities) > 0 {
		in.Settings.Priorities = map[placement.Rule]placement.Priority{}
		for k, v := range f.ConstraintPriorities {
			in.Settings.Priorities[k] = placement.Priority(v)
		}
	}
	if err := in.Settings.Validate(); err != nil {
		return &alloc.Error{Code: alloc.CodeInvalid, Message: err.Error()}
	}
	return nil
}

// placementHost builds the host as the placement rules see it, with the
// engine's view as its Resources.
func (fh *Host) placementHost(at string, sb int) (*placement.Host, error) {
	res, err := fh.build(at, sb)
	if err != nil {
		return nil, err
	}
	h := &placement.Host{Name: fh.Name, Type: fh.HostType, FaultDomain: fh.FaultDomain, UpgradeDomain: fh.UpgradeDomain,
		Disabled: fh.Disabled, Maintenance: fh.Maintenance, Resources: res, Properties: map[string]placement.Value{}}
	at = hostField(fh.Name)
	if err := placement.ValidateFaultDomain(fh.FaultDomain); err != nil {
		return nil, invalid(at+".fault_domain", fh.FaultDomain, "%v", err)
	}
	if fh.LoadAvg != nil {
		if *fh.LoadAvg < 0 || math.IsInf(*fh.LoadAvg, 0) {
			return nil, invalid(at+".load_avg", *fh.LoadAvg, "want 0 or more")
		}
		h.LoadAvg = *fh.LoadAvg
	}
	for _, k := range slices.Sorted(maps.Keys(fh.Properties)) {
		field := fmt.Sprintf("%s.properties[%q]", at, k)
		if err := placement.ValidatePropertyName(k); err != nil {
			return nil, invalid(field, k, "%v", err)
		}
		switch v := fh.Properties[k].(type) {
		case string:
			h.Properties[k] = placement.Str(v)
		case bool:
			h.Properties[k] = placement.BoolVal(v)
		case json.Number:
			i, err := v.Int64()
			if err != nil {
				return nil, invalid(field, raw(v.String()), "want a string, a boolean or a signed integer")
			}
			h.Properties[k] = placement.IntVal(i)
		default:
			return nil, invalid(field, fmt.Sprint(v), "want a string, a boolean or a signed integer")
		}
	}
	return h, nil
}

// hostField is the field name of a host in messages: hosts["name"] (as
// %q writes it; one per host, without fmt).
func hostField(name string) string { return "hosts[" + strconv.Quote(name) + "]" }

// parseCPUKey reads a CPU id key; field names it in an error (a function:
// a file has a million keys, and the name is needed only when one is bad).
func parseCPUKey(field func() string, k string) (cpuset.CPUID, error) {
	n, err := strconv.Atoi(k)
	if err != nil || n < 0 || n > cpuset.MaxID || (len(k) > 1 && k[0] == '0') || k[0] == '+' || k[0] == '-' {
		return 0, invalid(field(), k, "a CPU id must be a decimal number from 0 to %d", cpuset.MaxID)
	}
	return cpuset.CPUID(n), nil
}

func (fh *Host) build(at string, sb int) (*alloc.Host, error) {
	if fh.Name == "" || len(fh.Name) > 253 || strings.ContainsAny(fh.Name, " \t\n/") {
		return nil, invalid(at+".name", fh.Name, "want 1..253 characters without spaces or slashes")
	}
	at = hostField(fh.Name)
	h := &alloc.Host{Name: fh.Name, MemoryBytes: fh.Capacity.MemoryBytes, MemoryUsed: fh.Used.MemoryBytes,
		Topology: fh.Topology, Instances: map[string]int{}}
	if len(fh.Capacity.CPUs) == 0 {
		return nil, invalid(at+".capacity.cpus", raw("{}"), "a host needs at least one CPU")
	}
	h.CPUs = make([]alloc.CPU, 0, len(fh.Capacity.CPUs))
	for _, e := range fh.Capacity.CPUs {
		field := func() string { return fmt.Sprintf("%s.capacity.cpus[%q]", at, e.Key) } // built only for an error
		id, err := parseCPUKey(field, e.Key)
		if err != nil {
			return nil, err
		}
		if v := e.Value; v < 1 || v > 100*sb {
			return nil, invalid(field(), v, "want 1..%d pieces (share_base %d per CPU, up to 100x oversold)", 100*sb, sb)
		}
		h.CPUs = append(h.CPUs, alloc.CPU{ID: id, Capacity: e.Value})
	}
	slices.SortFunc(h.CPUs, func(a, b alloc.CPU) int { return int(a.ID) - int(b.ID) })
	for i := 1; i < len(h.CPUs); i++ {
		if h.CPUs[i].ID == h.CPUs[i-1].ID {
			return nil, invalid(fmt.Sprintf("%s.capacity.cpus", at), h.CPUs[i].ID, "CPU %d is given twice", h.CPUs[i].ID)
		}
	}
	seenUsed := make(map[cpuset.CPUID]bool, len(fh.Used.CPUs))
	for _, e := range fh.Used.CPUs {
		field := func() string { return fmt.Sprintf("%s.used.cpus[%q]", at, e.Key) }
		id, err := parseCPUKey(field, e.Key)
		if err != nil {
			return nil, err
		}
		if seenUsed[id] {
			return nil, invalid(field(), e.Value, "CPU %d is given twice", id)
		}
		seenUsed[id] = true
		i, ok := slices.BinarySearchFunc(h.CPUs, id, func(c alloc.CPU, id cpuset.CPUID) int { return int(c.ID) - int(id) })
		if !ok {
			return nil, invalid(field(), e.Value, "CPU %d is not in the host's capacity", id)
		}
		if v := e.Value; v < 0 || v > h.CPUs[i].Capacity {
			return nil, invalid(field(), v, "want 0..%d (the CPU's capacity)", h.CPUs[i].Capacity)
		}
		h.CPUs[i].Used = e.Value
	}
	if h.MemoryBytes <= 0 {
		return nil, invalid(at+".capacity.memory_bytes", h.MemoryBytes, "want more than 0")
	}
	if h.MemoryUsed < 0 || h.MemoryUsed > h.MemoryBytes {
		return nil, invalid(at+".used.memory_bytes", h.MemoryUsed, "want 0..%d (the host's memory)", h.MemoryBytes)
	}
	if err := fh.buildNUMA(at, h); err != nil {
		return nil, err
	}
	if t := fh.Topology; t != nil {
		if err := t.Validate(); err != nil {
			return nil, invalid(at+".topology", raw("{…}"), "%v", err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fh.Used.MemoryFirstQuotas)) {
		field := fmt.Sprintf("%s.used.memory_first_quotas[%q]", at, k)
		q, err := strconv.Atoi(k)
		n := fh.Used.MemoryFirstQuotas[k]
		switch {
		case err != nil || q < 1 || q > 100*sb*len(h.CPUs):
			return nil, invalid(field, n, "the key is a quota in pieces: want 1..%d", 100*sb*len(h.CPUs))
		case n < 0:
			return nil, invalid(field, n, "want a count of 0 or more")
		}
		if h.MemoryFirst == nil {
			h.MemoryFirst = map[int]int{}
		}
		h.MemoryFirst[q] = n
	}
	for _, svc := range slices.Sorted(maps.Keys(fh.Instances)) {
		if n := fh.Instances[svc]; n < 0 {
			return nil, invalid(fmt.Sprintf("%s.instances[%q]", at, svc), n, "want 0 or more")
		}
		h.Instances[svc] = fh.Instances[svc]
	}
	return h, nil
}

// buildNUMA adds the file's NUMA nodes to h: they must cover h's CPUs
// exactly once, and their usage must fit.
func (fh *Host) buildNUMA(at string, h *alloc.Host) error {
	hostCPUs := make([]cpuset.CPUID, len(h.CPUs))
	for i, c := range h.CPUs {
		hostCPUs[i] = c.ID
	}
	all := cpuset.Of(hostCPUs...)
	var covered cpuset.CPUs
	for i, fn := range fh.NUMANodes {
		field := func() string { return fmt.Sprintf("%s.numa_nodes[%d]", at, i) } // built only for an error
		if fn.ID == nil || *fn.ID < 0 || *fn.ID > cpuset.MaxID {
			return invalid(field()+".id", ptrString(fn.ID), "want a NUMA node id from 0 to %d", cpuset.MaxID)
		}
		cpus, err := cpuset.ParseCPUs(fn.CPUs)
		if err != nil {
			return invalid(field()+".cpus", fn.CPUs, "%v", err)
		}
		if !cpus.IsSubsetOf(all) {
			return invalid(field()+".cpus", fn.CPUs, "CPUs %s are not in the host's capacity", cpus.Difference(all))
		}
		if ov := cpus.Intersect(covered); !ov.IsEmpty() {
			return invalid(field()+".cpus", fn.CPUs, "CPUs %s are in another NUMA node too", ov)
		}
		if fn.MemoryBytes < 0 {
			return invalid(field()+".memory_bytes", fn.MemoryBytes, "want 0 or more")
		}
		covered = covered.Union(cpus)
		h.NUMANodes = append(h.NUMANodes, alloc.NUMANode{ID: cpuset.NUMANodeID(*fn.ID), CPUs: cpus, MemoryBytes: fn.MemoryBytes})
	}
	slices.SortFunc(h.NUMANodes, func(a, b alloc.NUMANode) int { return int(a.ID) - int(b.ID) })
	for i := 1; i < len(h.NUMANodes); i++ {
		if h.NUMANodes[i].ID == h.NUMANodes[i-1].ID {
			return invalid(at+".numa_nodes", h.NUMANodes[i].ID, "duplicate NUMA node id")
		}
	}
	if len(h.NUMANodes) > 0 && !covered.Equal(all) {
		return invalid(at+".numa_nodes", covered, "CPUs %s are in no NUMA node", all.Difference(covered))
	}
	for _, k := range slices.Sorted(maps.Keys(fh.Used.NUMAMemoryBytes)) {
		field := fmt.Sprintf("%s.used.numa_memory_bytes[%q]", at, k)
		n, err := strconv.Atoi(k)
		v := fh.Used.NUMAMemoryBytes[k]
		i, ok := slices.BinarySearchFunc(h.NUMANodes, cpuset.NUMANodeID(n), func(x alloc.NUMANode, id cpuset.NUMANodeID) int { return int(x.ID) - int(id) })
		if err != nil || !ok {
			return invalid(field, v, "no NUMA node %s in numa_nodes", k)
		}
		if v < 0 || v > h.NUMANodes[i].MemoryBytes {
			return invalid(field, v, "want 0..%d (the NUMA node's memory)", h.NUMANodes[i].MemoryBytes)
		}
		h.NUMANodes[i].MemoryUsed = v
	}
	return nil
}

func ptrString(p *int) string {
	if p == nil {
		return "null"
	}
	return strconv.Itoa(*p)
}

func (fr *Request) build(p alloc.Params) (*placement.Request, error) {
	if fr.CPU == nil {
		return nil, invalid("request.cpu", raw("null"), "a CPU amount is required (0 is allowed for memory-first)")
	}
	pieces, err := alloc.PiecesOf("request.cpu", float64(*fr.CPU), p.ShareBase)
	if err != nil {
		return nil, err
	}
	bind := fr.Bind == nil || *fr.Bind
	if bind && pieces == 0 {
		return nil, invalid("request.cpu", float64(*fr.CPU), "is 0; a CPU-bound request needs at least 1 piece (%s CPU at share_base %d)", alloc.FormatPieces(1, p.ShareBase), p.ShareBase)
	}
	st, err := alloc.ParseStrategy("request.strategy", fr.Strategy)
	if err != nil {
		return nil, err
	}
	if err := fr.Scheduling.Validate(); err != nil {
		var fe *model.FieldError
		if errors.As(err, &fe) {
			return nil, invalid("request."+fe.Key, raw(fe.Value), "%s", fe.Why)
		}
		return nil, err
	}
	d := model.Deploy{Size: model.Size{Pieces: pieces, Bind: bind, WholeCores: fr.WholeCores, Memory: fr.MemoryBytes}, Scheduling: fr.Scheduling, Rules: fr.Rules}
	d.Strategy = string(st)
	pr := placement.NewRequest(fr.Service, fr.Count, d)
	pr.UseBuffer = fr.UseBuffer
	if err := alloc.ValidateRequest(p, pr.Request); err != nil {
		return nil, err
	}
	if err := pr.Validate(); err != nil {
		return nil, err
	}
	return &pr, nil
}

func (fz *Resize) build(p alloc.Params, hosts []*alloc.Host) (*alloc.Resize, error) {
	i := slices.IndexFunc(hosts, func(h *alloc.Host) bool { return h.Name == fz.Host })
	if i < 0 {
		return nil, invalid("resize.host", fz.Host, "no such host in hosts")
	}
	curBind := fz.Current.Bind == nil || *fz.Current.Bind
	rz := &alloc.Resize{Host: fz.Host, MemoryDelta: fz.MemoryDeltaBytes, Bind: curBind}
	if fz.Bind != nil {
		rz.Bind = *fz.Bind
	}
	d, err := alloc.DeltaPiecesOf("resize.cpu_delta", float64(fz.CPUDelta), p.ShareBase)
	if err != nil {
		return nil, err
	}
	rz.CPUDelta = d
	numa := -1
	if fz.Current.NUMANode != nil {
		numa = *fz.Current.NUMANode
	}
	rz.Current = model.Allocation{Bind: curBind, CPUs: map[cpuset.CPUID]int{}, NUMANode: cpuset.NUMANodeID(numa), Memory: fz.Current.MemoryBytes}
	for _, k := range slices.Sorted(maps.Keys(fz.Current.CPUs)) {
		id, err := parseCPUKey(func() string { return fmt.Sprintf("resize.current.cpus[%q]", k) }, k)
		if err != nil {
			return nil, err
		}
		rz.Current.CPUs[id] = fz.Current.CPUs[k]
	}
	if curBind && len(rz.Current.CPUs) == 0 {
		return nil, invalid("resize.current.cpus", raw("{}"), "a bound instance holds at least one CPU (set current.bind to false for memory-first)")
	}
	if !curBind {
		q, err := alloc.PiecesOf("resize.current.cpu_quota", float64(fz.Current.CPUQuota), p.ShareBase)
		if err != nil {
			return nil, err
		}
		rz.Current.CPUQuota = q
		if len(rz.Current.CPUs) > 0 {
			return nil, invalid("resize.current.cpus", raw("{…}"), "a memory-first instance holds no CPUs")
		}
	}
	return rz, nil
}

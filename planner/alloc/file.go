package alloc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/topology"
)

// File is the input of `pinfold plan`: hosts and either a request for new
// instances or a resize of one instance. Its JSON form is documented in
// docs/PLAN.md.
type File struct {
	ShareBase        *int        `json:"share_base"`
	MaxFragmentCores *int        `json:"max_fragment_cores"`
	Hosts            []FileHost  `json:"hosts"`
	Request          *FileReq    `json:"request"`
	Resize           *FileResize `json:"resize"`
}

// FileHost is one host of a plan file.
type FileHost struct {
	Name     string `json:"name"`
	Capacity struct {
		CPUs        map[string]int `json:"cpus"`
		MemoryBytes int64          `json:"memory_bytes"`
	} `json:"capacity"`
	Used struct {
		CPUs            map[string]int   `json:"cpus"`
		MemoryBytes     int64            `json:"memory_bytes"`
		NUMAMemoryBytes map[string]int64 `json:"numa_memory_bytes"`
	} `json:"used"`
	NUMANodes []struct {
		ID          *int   `json:"id"`
		CPUs        string `json:"cpus"`
		MemoryBytes int64  `json:"memory_bytes"`
	} `json:"numa_nodes"`
	// Topology is optional: the output of `pinfold topology -o json`; its
	// SMT siblings and L3 groups guide which CPUs are taken.
	Topology  *topology.Topology `json:"topology"`
	Instances map[string]int     `json:"instances"`
}

// FileReq is a request for new instances.
type FileReq struct {
	Service     string   `json:"service"`
	Count       int      `json:"count"`
	CPU         *float64 `json:"cpu"`
	Bind        *bool    `json:"bind"`
	MemoryBytes int64    `json:"memory_bytes"`
	Strategy    string   `json:"strategy"`
	MaxPerHost  int      `json:"max_per_host"`
}

// FileResize is a resize of one instance.
type FileResize struct {
	Host    string `json:"host"`
	Current struct {
		CPUs        map[string]int `json:"cpus"`
		CPUQuota    float64        `json:"cpu_quota"`
		NUMANode    *int           `json:"numa_node"`
		MemoryBytes int64          `json:"memory_bytes"`
		Bind        *bool          `json:"bind"`
	} `json:"current"`
	CPUDelta         float64 `json:"cpu_delta"`
	MemoryDeltaBytes int64   `json:"memory_delta_bytes"`
	Bind             *bool   `json:"bind"`
}

// Input is a decoded and validated plan file.
type Input struct {
	Params  Params
	Hosts   []*Host
	Request *Request
	Resize  *Resize
}

// maxFileSize bounds a plan file (a 10,000-host file is about 20 MiB).
const maxFileSize = 256 << 20

// DecodeFile reads and validates a plan file. Unknown fields, trailing data
// and out-of-range values are *Error values with CodeInvalid naming the field.
func DecodeFile(r io.Reader) (*Input, error) {
	var f File
	if err := DecodeJSON(r, &f); err != nil {
		return nil, err
	}
	return f.Validate()
}

// DecodeJSON reads one strict JSON object (no unknown fields, no trailing
// data, at most 256 MiB) into v; errors are *Error with CodeInvalid.
func DecodeJSON(r io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("read plan file: %v", err)}
	}
	if len(b) > maxFileSize {
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("plan file larger than %d bytes", maxFileSize)}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(b, err)
	}
	if dec.More() {
		return &Error{Code: CodeInvalid, Message: "plan file: trailing data after the JSON object"}
	}
	return nil
}

// jsonError turns encoding/json errors into messages with a line and field.
func jsonError(b []byte, err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line := bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n")) + 1
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("plan file is not valid JSON (line %d): %v", line, se)}
	case errors.As(err, &te):
		// Embedded Go structs appear in the path by type name (request.FileReq.count):
		// keep only the JSON keys, which are all lower case.
		var path []string
		for _, p := range strings.Split(te.Field, ".") {
			if p != "" && !unicode.IsUpper(rune(p[0])) {
				path = append(path, p)
			}
		}
		field := strings.Join(path, ".")
		return &Error{Code: CodeInvalid, Field: field, Value: te.Value,
			Message: fmt.Sprintf("%s: got a JSON %s, want %s", field, te.Value, te.Type)}
	case errors.Is(err, io.EOF):
		return &Error{Code: CodeInvalid, Message: "plan file is empty"}
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return &Error{Code: CodeInvalid, Message: "plan file: " + msg}
}

// Validate checks every field and builds the engine's input.
func (f *File) Validate() (*Input, error) {
	in := &Input{Params: DefaultParams()}
	if f.ShareBase != nil {
		in.Params.ShareBase = *f.ShareBase
	}
	if f.MaxFragmentCores != nil {
		in.Params.MaxFragmentCores = *f.MaxFragmentCores
	}
	if err := in.Params.Validate(); err != nil {
		return nil, err
	}
	sb := in.Params.ShareBase
	if len(f.Hosts) == 0 {
		return nil, invalid("hosts", raw("[]"), "at least one host is required")
	}
	seen := map[string]bool{}
	for i, fh := range f.Hosts {
		h, err := fh.build(fmt.Sprintf("hosts[%d]", i), sb)
		if err != nil {
			return nil, err
		}
		if seen[h.Name] {
			return nil, invalid(fmt.Sprintf("hosts[%d].name", i), h.Name, "duplicate host name")
		}
		seen[h.Name] = true
		in.Hosts = append(in.Hosts, h)
	}
	switch {
	case f.Request == nil && f.Resize == nil:
		return nil, invalid("request", raw("null"), "the file needs a request or a resize")
	case f.Request != nil && f.Resize != nil:
		return nil, invalid("resize", raw("{…}"), "give a request or a resize, not both")
	case f.Request != nil:
		r, err := f.Request.build(in.Params)
		if err != nil {
			return nil, err
		}
		in.Request = r
	default:
		rz, err := f.Resize.build(in.Params, in.Hosts)
		if err != nil {
			return nil, err
		}
		in.Resize = rz
	}
	return in, nil
}

func parseCPUKey(field, k string) (cpuset.CPUID, error) {
	n, err := strconv.Atoi(k)
	if err != nil || n < 0 || n > cpuset.MaxID || strconv.Itoa(n) != k {
		return 0, invalid(field, k, "a CPU id must be a decimal number from 0 to %d", cpuset.MaxID)
	}
	return cpuset.CPUID(n), nil
}

func (fh *FileHost) build(at string, sb int) (*Host, error) {
	if fh.Name == "" || len(fh.Name) > 253 || strings.ContainsAny(fh.Name, " \t\n/") {
		return nil, invalid(at+".name", fh.Name, "want 1..253 characters without spaces or slashes")
	}
	at = fmt.Sprintf("hosts[%q]", fh.Name)
	h := &Host{Name: fh.Name, MemoryBytes: fh.Capacity.MemoryBytes, MemoryUsed: fh.Used.MemoryBytes,
		Topology: fh.Topology, Instances: map[string]int{}}
	if len(fh.Capacity.CPUs) == 0 {
		return nil, invalid(at+".capacity.cpus", raw("{}"), "a host needs at least one CPU")
	}
	for _, k := range slices.Sorted(maps.Keys(fh.Capacity.CPUs)) {
		field := fmt.Sprintf("%s.capacity.cpus[%q]", at, k)
		id, err := parseCPUKey(field, k)
		if err != nil {
			return nil, err
		}
		v := fh.Capacity.CPUs[k]
		if v < 1 || v > 100*sb {
			return nil, invalid(field, v, "want 1..%d pieces (share_base %d per CPU, up to 100x oversold)", 100*sb, sb)
		}
		h.CPUs = append(h.CPUs, CPU{ID: id, Capacity: v})
	}
	slices.SortFunc(h.CPUs, func(a, b CPU) int { return int(a.ID) - int(b.ID) })
	for _, k := range slices.Sorted(maps.Keys(fh.Used.CPUs)) {
		field := fmt.Sprintf("%s.used.cpus[%q]", at, k)
		id, err := parseCPUKey(field, k)
		if err != nil {
			return nil, err
		}
		i, ok := slices.BinarySearchFunc(h.CPUs, id, func(c CPU, id cpuset.CPUID) int { return int(c.ID) - int(id) })
		if !ok {
			return nil, invalid(field, fh.Used.CPUs[k], "CPU %d is not in the host's capacity", id)
		}
		if v := fh.Used.CPUs[k]; v < 0 || v > h.CPUs[i].Capacity {
			return nil, invalid(field, v, "want 0..%d (the CPU's capacity)", h.CPUs[i].Capacity)
		}
		h.CPUs[i].Used = fh.Used.CPUs[k]
	}
	if h.MemoryBytes <= 0 {
		return nil, invalid(at+".capacity.memory_bytes", h.MemoryBytes, "want more than 0")
	}
	if h.MemoryUsed < 0 || h.MemoryUsed > h.MemoryBytes {
		return nil, invalid(at+".used.memory_bytes", h.MemoryUsed, "want 0..%d (the host's memory)", h.MemoryBytes)
	}
	hostCPUs := make([]cpuset.CPUID, len(h.CPUs))
	for i, c := range h.CPUs {
		hostCPUs[i] = c.ID
	}
	all := cpuset.Of(hostCPUs...)
	var covered cpuset.CPUs
	for i, fn := range fh.NUMANodes {
		field := fmt.Sprintf("%s.numa_nodes[%d]", at, i)
		if fn.ID == nil || *fn.ID < 0 || *fn.ID > cpuset.MaxID {
			return nil, invalid(field+".id", ptrString(fn.ID), "want a NUMA node id from 0 to %d", cpuset.MaxID)
		}
		cpus, err := cpuset.ParseCPUs(fn.CPUs)
		if err != nil {
			return nil, invalid(field+".cpus", fn.CPUs, "%v", err)
		}
		if !cpus.IsSubsetOf(all) {
			return nil, invalid(field+".cpus", fn.CPUs, "CPUs %s are not in the host's capacity", cpus.Difference(all))
		}
		if ov := cpus.Intersect(covered); !ov.IsEmpty() {
			return nil, invalid(field+".cpus", fn.CPUs, "CPUs %s are in another NUMA node too", ov)
		}
		if fn.MemoryBytes < 0 {
			return nil, invalid(field+".memory_bytes", fn.MemoryBytes, "want 0 or more")
		}
		covered = covered.Union(cpus)
		h.NUMANodes = append(h.NUMANodes, NUMANode{ID: cpuset.NUMANodeID(*fn.ID), CPUs: cpus, MemoryBytes: fn.MemoryBytes})
	}
	slices.SortFunc(h.NUMANodes, func(a, b NUMANode) int { return int(a.ID) - int(b.ID) })
	for i := 1; i < len(h.NUMANodes); i++ {
		if h.NUMANodes[i].ID == h.NUMANodes[i-1].ID {
			return nil, invalid(at+".numa_nodes", h.NUMANodes[i].ID, "duplicate NUMA node id")
		}
	}
	if len(h.NUMANodes) > 0 && !covered.Equal(all) {
		return nil, invalid(at+".numa_nodes", covered, "CPUs %s are in no NUMA node", all.Difference(covered))
	}
	for _, k := range slices.Sorted(maps.Keys(fh.Used.NUMAMemoryBytes)) {
		field := fmt.Sprintf("%s.used.numa_memory_bytes[%q]", at, k)
		n, err := strconv.Atoi(k)
		v := fh.Used.NUMAMemoryBytes[k]
		i, ok := slices.BinarySearchFunc(h.NUMANodes, cpuset.NUMANodeID(n), func(x NUMANode, id cpuset.NUMANodeID) int { return int(x.ID) - int(id) })
		if err != nil || !ok {
			return nil, invalid(field, v, "no NUMA node %s in numa_nodes", k)
		}
		if v < 0 || v > h.NUMANodes[i].MemoryBytes {
			return nil, invalid(field, v, "want 0..%d (the NUMA node's memory)", h.NUMANodes[i].MemoryBytes)
		}
		h.NUMANodes[i].MemoryUsed = v
	}
	if t := fh.Topology; t != nil {
		if err := t.Validate(); err != nil {
			return nil, invalid(at+".topology", raw("{…}"), "%v", err)
		}
	}
	for _, svc := range slices.Sorted(maps.Keys(fh.Instances)) {
		if n := fh.Instances[svc]; n < 0 {
			return nil, invalid(fmt.Sprintf("%s.instances[%q]", at, svc), n, "want 0 or more")
		}
		h.Instances[svc] = fh.Instances[svc]
	}
	return h, nil
}

func ptrString(p *int) string {
	if p == nil {
		return "null"
	}
	return strconv.Itoa(*p)
}

func (fr *FileReq) build(p Params) (*Request, error) {
	if fr.CPU == nil {
		return nil, invalid("request.cpu", raw("null"), "a CPU amount is required (0 is allowed for memory-first)")
	}
	pieces, err := PiecesOf("request.cpu", *fr.CPU, p.ShareBase)
	if err != nil {
		return nil, err
	}
	bind := fr.Bind == nil || *fr.Bind
	if bind && pieces == 0 {
		return nil, invalid("request.cpu", *fr.CPU, "rounds to 0 pieces at share_base %d; a CPU-bound request needs at least 1", p.ShareBase)
	}
	st, err := ParseStrategy("request.strategy", fr.Strategy)
	if err != nil {
		return nil, err
	}
	r := &Request{Service: fr.Service, Count: fr.Count, Pieces: pieces, Bind: bind,
		MemoryBytes: fr.MemoryBytes, Strategy: st, MaxPerHost: fr.MaxPerHost}
	if err := ValidateRequest(p, *r); err != nil {
		return nil, err
	}
	return r, nil
}

func (fz *FileResize) build(p Params, hosts []*Host) (*Resize, error) {
	i := slices.IndexFunc(hosts, func(h *Host) bool { return h.Name == fz.Host })
	if i < 0 {
		return nil, invalid("resize.host", fz.Host, "no such host in hosts")
	}
	curBind := fz.Current.Bind == nil || *fz.Current.Bind
	rz := &Resize{Host: fz.Host, CurrentBind: curBind, MemoryDelta: fz.MemoryDeltaBytes, Bind: curBind}
	if fz.Bind != nil {
		rz.Bind = *fz.Bind
	}
	delta := fz.CPUDelta
	sign := 1
	if delta < 0 {
		sign, delta = -1, -delta
	}
	d, err := PiecesOf("resize.cpu_delta", delta, p.ShareBase)
	if err != nil {
		return nil, err
	}
	rz.CPUDelta = sign * d
	numa := -1
	if fz.Current.NUMANode != nil {
		numa = *fz.Current.NUMANode
	}
	rz.Current = Placement{Host: fz.Host, CPUs: map[cpuset.CPUID]int{}, NUMANode: cpuset.NUMANodeID(numa), MemoryBytes: fz.Current.MemoryBytes}
	for _, k := range slices.Sorted(maps.Keys(fz.Current.CPUs)) {
		id, err := parseCPUKey(fmt.Sprintf("resize.current.cpus[%q]", k), k)
		if err != nil {
			return nil, err
		}
		rz.Current.CPUs[id] = fz.Current.CPUs[k]
	}
	if curBind && len(rz.Current.CPUs) == 0 {
		return nil, invalid("resize.current.cpus", raw("{}"), "a bound instance holds at least one CPU (set current.bind to false for memory-first)")
	}
	if !curBind {
		q, err := PiecesOf("resize.current.cpu_quota", fz.Current.CPUQuota, p.ShareBase)
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

// Output is the result of `pinfold plan -o json`.
type Output struct {
	Capacity      map[string]int    `json:"capacity"`
	TotalCapacity int               `json:"total_capacity"`
	Placements    []OutputPlacement `json:"placements"`
	// DomainSpread and Violations come from the placement layer: the fault
	// and upgrade domain rule used, and the soft rules that gave way.
	DomainSpread string      `json:"domain_spread,omitempty"`
	Violations   []Violation `json:"violations,omitempty"`
	Error        *Error      `json:"error"`
}

// OutputPlacement is a Placement with the quota as a decimal CPU amount.
type OutputPlacement struct {
	Placement
	CPUQuota *json.Number `json:"cpu_quota,omitempty"`
}

// NewOutput renders placements for output.
func NewOutput(p Params, capacity map[string]int, total int, pls []Placement, err *Error) Output {
	o := Output{Capacity: capacity, TotalCapacity: total, Placements: []OutputPlacement{}, Error: err}
	if o.Capacity == nil {
		o.Capacity = map[string]int{}
	}
	for _, pl := range pls {
		op := OutputPlacement{Placement: pl}
		if len(pl.CPUs) == 0 {
			n := json.Number(FormatPieces(pl.CPUQuota, p.ShareBase))
			op.CPUQuota = &n
		}
		o.Placements = append(o.Placements, op)
	}
	return o
}

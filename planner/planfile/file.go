// Package planfile is the `pinfold plan` file: its JSON form (docs/PLAN.md),
// strict decoding and validation that name the offending field, the engine
// and placement inputs it builds, and the JSON output of a plan. It is the
// one place the file format lives; the engine (alloc) and the placement
// rules (placement) know nothing of it.
package planfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/topology"
)

// File is the input of `pinfold plan`: hosts and either a request for new
// instances or a resize of one instance, with the cluster's placement
// settings.
type File struct {
	ShareBase            *int               `json:"share_base"`
	MaxFragmentCores     *int               `json:"max_fragment_cores"`
	Hosts                []Host             `json:"hosts"`
	Request              *Request           `json:"request"`
	Resize               *Resize            `json:"resize"`
	BufferPercent        map[string]float64 `json:"buffer_percent"`
	OverbookingPercent   map[string]float64 `json:"overbooking_percent"`
	ConstraintPriorities map[string]int     `json:"constraint_priorities"`
}

// Host is one host of a plan file: its capacity and usage, and its
// placement fields.
type Host struct {
	Name     string `json:"name"`
	Capacity struct {
		CPUs        Pieces `json:"cpus"`
		MemoryBytes int64  `json:"memory_bytes"`
	} `json:"capacity"`
	Used struct {
		CPUs            Pieces           `json:"cpus"`
		MemoryBytes     int64            `json:"memory_bytes"`
		NUMAMemoryBytes map[string]int64 `json:"numa_memory_bytes"`
		// MemoryFirstQuotas counts the host's memory-first instances by
		// CPU quota in pieces ({"300": 2}): the shared pool keeps the
		// largest (bound placements leave it enough CPUs).
		MemoryFirstQuotas map[string]int `json:"memory_first_quotas,omitempty"`
	} `json:"used"`
	NUMANodes []NUMANode `json:"numa_nodes"`
	// Topology is optional: the output of `pinfold topology -o json`; its
	// SMT siblings and L3 groups guide which CPUs are taken.
	Topology      *topology.Topology `json:"topology"`
	Instances     map[string]int     `json:"instances"`
	Properties    map[string]any     `json:"properties"`
	HostType      string             `json:"host_type"`
	FaultDomain   string             `json:"fault_domain"`
	UpgradeDomain string             `json:"upgrade_domain"`
	Disabled      bool               `json:"disabled"`
	Maintenance   bool               `json:"maintenance"`
	LoadAvg       *float64           `json:"load_avg"`
}

// NUMANode is one NUMA node of a host: its CPUs (a CPU list, "0-63") and
// memory.
type NUMANode struct {
	ID          *int   `json:"id"`
	CPUs        string `json:"cpus"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// Request is a request for new instances with its placement rules.
type Request struct {
	Service     string     `json:"service"`
	Count       int        `json:"count"`
	CPU         *CPUAmount `json:"cpu"`
	Bind        *bool      `json:"bind"`
	MemoryBytes int64      `json:"memory_bytes"`
	// How the instances are scheduled, with the stored record's keys
	// (strategy, max_per_host, …).
	model.Scheduling
	// The placement rules, with the stored record's keys (constraint,
	// affinity, anti_affinity, placement_policy, hosts_order,
	// domain_spread).
	model.Rules
	UseBuffer  bool `json:"use_buffer"`
	WholeCores bool `json:"whole_cores"`
}

// Resize is a resize of one instance.
type Resize struct {
	Host    string `json:"host"`
	Current struct {
		CPUs        map[string]int `json:"cpus"`
		CPUQuota    CPUAmount      `json:"cpu_quota"`
		NUMANode    *int           `json:"numa_node"`
		MemoryBytes int64          `json:"memory_bytes"`
		Bind        *bool          `json:"bind"`
	} `json:"current"`
	CPUDelta         CPUAmount `json:"cpu_delta"`
	MemoryDeltaBytes int64     `json:"memory_delta_bytes"`
	Bind             *bool     `json:"bind"`
}

// Input is a decoded and validated plan file: the engine's parameters,
// the hosts as the placement rules see them (Resources is the engine's
// view), and either a request or a resize.
type Input struct {
	Params   alloc.Params
	Hosts    []*placement.Host
	Request  *placement.Request
	Resize   *alloc.Resize
	Settings placement.Settings
}

// Decode reads and validates a plan file. Unknown fields, trailing data and
// out-of-range values are *alloc.Error values with CodeInvalid naming the
// field.
//
// The file is read into one buffer (sized by the file's size when r can
// tell it) and decoded host by host into the engine's hosts (decodeStream):
// the file's own form of a host is held for one host at a time, so a
// 10,000-host file never exists decoded whole. Any input the streaming
// decoder does not take as it is (an error anywhere, or a shape it leaves
// to encoding/json) is decoded whole as before, so the errors and their
// order are exactly those of decoding the whole file (TestStreamIsWhole,
// FuzzStreamIsWhole).
func Decode(r io.Reader) (*Input, error) {
	b, err := readFile(r)
	if err != nil {
		return nil, err
	}
	if in, ok := decodeStream(b); ok {
		return in, nil
	}
	return decodeWhole(b)
}

// decodeWhole decodes b into a File, then validates it.
func decodeWhole(b []byte) (*Input, error) {
	var f File
	if err := decodeJSON(b, &f); err != nil {
		return nil, err
	}
	return f.Validate()
}

// readFile reads a plan file of at most MaxFileSize bytes. A regular file
// is read into a buffer of its size in one allocation (io.ReadAll grows a
// slice by doubling: twice the file in all, and the pages faulted in).
func readFile(r io.Reader) ([]byte, error) {
	size := int64(512)
	switch r := r.(type) {
	case interface{ Stat() (os.FileInfo, error) }:
		if fi, err := r.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			size = fi.Size() + 1 // +1: the read that sees EOF needs room
		}
	case interface{ Len() int }: // bytes and strings readers
		size = int64(r.Len()) + 1
	}
	lr := io.LimitReader(r, MaxFileSize+1)
	b := make([]byte, 0, min(size, MaxFileSize+1))
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, cap(b)) // doubling (append grows large slices by a quarter)
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, &alloc.Error{Code: alloc.CodeInvalid, Message: fmt.Sprintf("read plan file: %v", err)}
		}
	}
	if len(b) > MaxFileSize {
		return nil, &alloc.Error{Code: alloc.CodeInvalid, Message: fmt.Sprintf("plan file larger than %s", alloc.FormatBytes(MaxFileSize))}
	}
	return b, nil
}

// raw is a value shown as is, not quoted ("[]", "null").
type raw string

func invalid(field string, value any, reason string, args ...any) *alloc.Error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return &alloc.Error{Code: alloc.CodeInvalid, Field: field, Value: v,
		Message: fmt.Sprintf("%s = %s: %s", field, v, fmt.Sprintf(reason, args...))}
}

// MaxFileSize bounds a plan file (a 10,000-host file is about 20 MiB).
const MaxFileSize = 256 << 20

// decodeJSON decodes b, one strict JSON object (no unknown fields, no
// trailing data), into v; errors are *alloc.Error with CodeInvalid.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber() // integer properties beyond 2^53 stay exact
	if err := dec.Decode(v); err != nil {
		return jsonError(b, err)
	}
	// Anything but white space after the object is trailing data: Decoder.More
	// says "no more" at a stray '}' or ']', so look at the bytes themselves.
	if rest := bytes.TrimSpace(b[min(int(dec.InputOffset()), len(b)):]); len(rest) > 0 {
		line := bytes.Count(b[:len(b)-len(rest)], []byte("\n")) + 1
		return &alloc.Error{Code: alloc.CodeInvalid, Message: fmt.Sprintf("plan file: trailing data after the JSON object (line %d: %q)", line, clipBytes(rest, 20))}
	}
	return nil
}

// clipBytes is b cut to at most n bytes, for messages that echo input.
func clipBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// jsonError turns encoding/json errors into messages with a line and field.
func jsonError(b []byte, err error) *alloc.Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line := bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n")) + 1
		return &alloc.Error{Code: alloc.CodeInvalid, Message: fmt.Sprintf("plan file is not valid JSON (line %d): %v", line, se)}
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
		return &alloc.Error{Code: alloc.CodeInvalid, Field: field, Value: te.Value,
			Message: fmt.Sprintf("%s: got a JSON %s, want %s", field, te.Value, te.Type)}
	case errors.Is(err, io.EOF):
		return &alloc.Error{Code: alloc.CodeInvalid, Message: "plan file is empty"}
	}
	if fe, ok := errors.AsType[*model.FieldError](err); ok {
		// A model type's own reader: only the request holds one (its
		// scheduling keys, e.g. a priority's name).
		return invalid("request."+fe.Key, raw(fe.Value), "%s", fe.Why)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return &alloc.Error{Code: alloc.CodeInvalid, Message: "plan file: " + msg}
}

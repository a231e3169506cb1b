package planfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/placement"
)

// Output is the result of `pinfold plan -o json`. Placements are the
// engine's, as it returned them: WriteJSON renders each as it writes it
// (a 100,000-instance plan is never copied into a second slice).
type Output struct {
	Capacity      map[string]int
	TotalCapacity int
	Placements    []alloc.Placement
	// ShareBase renders a memory-first placement's quota in CPUs.
	ShareBase int
	// DomainSpread and Violations come from the placement rules: the fault
	// and upgrade domain rule used, and the soft rules that gave way.
	DomainSpread string
	Violations   []placement.Violation
	Error        *OutputError
}

// OutputError is why nothing was planned: the engine's error and, when
// the placement rules ran, rule by rule the hosts each eliminated.
type OutputError struct {
	*alloc.Error
	Eliminations []placement.Elimination `json:"eliminations,omitempty"`
}

// OutputPlacement is a Placement as the JSON output writes it: with the
// quota as a decimal CPU amount (memory-first placements only).
type OutputPlacement struct {
	alloc.Placement
	CPUQuota *json.Number `json:"cpu_quota,omitempty"`
}

// NewOutput is the output of a plan: pls are kept, not copied.
func NewOutput(p alloc.Params, capacity map[string]int, total int, pls []alloc.Placement, err *OutputError) Output {
	o := Output{Capacity: capacity, TotalCapacity: total, Placements: pls, ShareBase: p.ShareBase, Error: err}
	if o.Capacity == nil {
		o.Capacity = map[string]int{}
	}
	return o
}

// Quota is a placement's CPU quota as the output shows it: in CPUs for a
// memory-first placement (one that holds no CPUs), "" for a bound one.
func (o Output) Quota(pl alloc.Placement) string {
	if len(pl.CPUs) > 0 {
		return ""
	}
	return alloc.FormatPieces(pl.CPUQuota, o.ShareBase)
}

// WriteJSON writes o as `pinfold plan -o json` prints it: indented, with
// one capacity entry and one placement per line (a 100,000-instance plan
// is written in a fraction of the time re-indenting the whole document
// takes, and reads as one instance a line). Each line is encoded into one
// reused buffer: the bytes are those json.Marshal gives an OutputPlacement
// (TestWriteJSONIsMarshal).
func (o Output) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	line := func(indent string, v any, last bool) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		bw.WriteString(indent)
		bw.Write(b)
		if !last {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
		return nil
	}
	var buf []byte
	bw.WriteString("{\n  \"capacity\": {")
	names := slices.Sorted(maps.Keys(o.Capacity))
	if len(names) > 0 {
		bw.WriteByte('\n')
	}
	for i, name := range names {
		buf = append(appendString(append(buf[:0], "    "...), name), ": "...)
		buf = strconv.AppendInt(buf, int64(o.Capacity[name]), 10)
		if i < len(names)-1 {
			buf = append(buf, ',')
		}
		bw.Write(append(buf, '\n'))
	}
	if len(names) > 0 {
		bw.WriteString("  ")
	}
	fmt.Fprintf(bw, "},\n  \"total_capacity\": %d,\n  \"placements\": [", o.TotalCapacity)
	if len(o.Placements) > 0 {
		bw.WriteByte('\n')
	}
	var (
		pw     placementWriter
		quotas = map[int]string{} // a plan's quotas are all one (FormatPieces allocates)
	)
	for i, p := range o.Placements {
		q := ""
		if len(p.CPUs) == 0 {
			if q = quotas[p.CPUQuota]; q == "" {
				q = o.Quota(p)
				quotas[p.CPUQuota] = q
			}
		}
		var ok bool
		buf, ok = pw.append(append(buf[:0], "    "...), p, q)
		if !ok {
			// A shape the direct encoding does not cover: encoding/json.
			op := OutputPlacement{Placement: p}
			if q != "" {
				n := json.Number(q)
				op.CPUQuota = &n
			}
			b, err := json.Marshal(op)
			if err != nil {
				return err
			}
			buf = append(buf[:4], b...)
		}
		if i < len(o.Placements)-1 {
			buf = append(buf, ',')
		}
		bw.Write(append(buf, '\n'))
	}
	if len(o.Placements) > 0 {
		bw.WriteString("  ")
	}
	bw.WriteString("],\n")
	if o.DomainSpread != "" {
		if err := line(`  "domain_spread": `, o.DomainSpread, false); err != nil {
			return err
		}
	}
	if len(o.Violations) > 0 {
		if err := line(`  "violations": `, o.Violations, false); err != nil {
			return err
		}
	}
	e, err := json.MarshalIndent(o.Error, "  ", "  ")
	if err != nil {
		return err
	}
	bw.WriteString(`  "error": `)
	bw.Write(e)
	bw.WriteString("\n}\n")
	return bw.Flush()
}

// placementWriter encodes placements; what it keeps is reused from one to
// the next.
type placementWriter struct {
	keys     []cpuset.CPUID
	host     string // the last host, and its JSON string
	hostJSON []byte
}

// append appends p as json.Marshal writes its OutputPlacement: host, bind,
// whole_cores, cpus (keys ordered as strings, as encoding/json orders a
// map's), numa_node, memory_bytes, memory_soft_bytes, cpu_quota. Host
// ports, and a quota that is not a JSON number, are left to encoding/json
// (ok false). q is the quota as Output.Quota gives it.
func (pw *placementWriter) append(b []byte, p alloc.Placement, q string) ([]byte, bool) {
	if len(p.HostPorts) > 0 {
		return b, false
	}
	if p.Host != pw.host || pw.hostJSON == nil {
		pw.host, pw.hostJSON = p.Host, appendString(pw.hostJSON[:0], p.Host)
	}
	b = append(append(b, `{"host":`...), pw.hostJSON...)
	if p.Bind {
		b = append(b, `,"bind":true`...)
	}
	if p.WholeCores {
		b = append(b, `,"whole_cores":true`...)
	}
	if p.CPUs == nil {
		b = append(b, `,"cpus":null`...)
	} else {
		pw.keys = pw.keys[:0]
		for id := range p.CPUs {
			pw.keys = append(pw.keys, id)
		}
		slices.SortFunc(pw.keys, cmpDecimal)
		b = append(b, `,"cpus":{`...)
		for i, id := range pw.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(strconv.AppendInt(append(b, '"'), int64(id), 10), `":`...)
			b = strconv.AppendInt(b, int64(p.CPUs[id]), 10)
		}
		b = append(b, '}')
	}
	b = strconv.AppendInt(append(b, `,"numa_node":`...), int64(p.NUMANode), 10)
	b = strconv.AppendInt(append(b, `,"memory_bytes":`...), p.Memory, 10)
	if p.MemorySoft != 0 {
		b = strconv.AppendInt(append(b, `,"memory_soft_bytes":`...), p.MemorySoft, 10)
	}
	if q != "" {
		if !isNumber(q) {
			return b, false // encoding/json's error for an invalid json.Number
		}
		b = append(append(b, `,"cpu_quota":`...), q...)
	}
	return append(b, '}'), true
}

// cmpDecimal orders CPU ids as their decimal strings compare (encoding/json
// sorts a map's keys as strings: "10" before "2").
func cmpDecimal(x, y cpuset.CPUID) int {
	var a, b [20]byte
	return compareBytes(strconv.AppendInt(a[:0], int64(x), 10), strconv.AppendInt(b[:0], int64(y), 10))
}

func compareBytes(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return len(a) - len(b)
}

// appendString appends s as a JSON string as encoding/json writes it:
// printable ASCII other than the quote, the backslash and <, > and & (which
// encoding/json escapes for HTML) directly, anything else through
// encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// isNumber: s is a JSON number (-?int frac? exp?), as encoding/json
// requires of a json.Number it writes.
func isNumber(s string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		digits()
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

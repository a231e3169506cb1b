package planfile

// The JSON output as it was written before placements were encoded
// directly (commit ce236e1): the reference TestWriteJSONIsMarshal and
// TestStreamedPlanIsWhole hold WriteJSON to, byte for byte.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
)

type refOutput struct {
	Capacity      map[string]int        `json:"capacity"`
	TotalCapacity int                   `json:"total_capacity"`
	Placements    []OutputPlacement     `json:"placements"`
	DomainSpread  string                `json:"domain_spread,omitempty"`
	Violations    []placement.Violation `json:"violations,omitempty"`
	Error         *OutputError          `json:"error"`
}

func newRefOutput(p alloc.Params, capacity map[string]int, total int, pls []alloc.Placement, err *OutputError) refOutput {
	o := refOutput{Capacity: capacity, TotalCapacity: total, Placements: []OutputPlacement{}, Error: err}
	if o.Capacity == nil {
		o.Capacity = map[string]int{}
	}
	for _, pl := range pls {
		op := OutputPlacement{Placement: pl}
		if len(pl.CPUs) == 0 {
			n := json.Number(alloc.FormatPieces(pl.CPUQuota, p.ShareBase))
			op.CPUQuota = &n
		}
		o.Placements = append(o.Placements, op)
	}
	return o
}

func (o refOutput) WriteJSON(w io.Writer) error {
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
	bw.WriteString("{\n  \"capacity\": {")
	names := slices.Sorted(maps.Keys(o.Capacity))
	if len(names) > 0 {
		bw.WriteByte('\n')
	}
	for i, name := range names {
		k, _ := json.Marshal(name)
		bw.WriteString("    ")
		bw.Write(k)
		bw.WriteString(": ")
		bw.WriteString(strconv.Itoa(o.Capacity[name]))
		if i < len(names)-1 {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
	}
	if len(names) > 0 {
		bw.WriteString("  ")
	}
	fmt.Fprintf(bw, "},\n  \"total_capacity\": %d,\n  \"placements\": [", o.TotalCapacity)
	if len(o.Placements) > 0 {
		bw.WriteByte('\n')
	}
	for i, p := range o.Placements {
		if err := line("    ", p, i == len(o.Placements)-1); err != nil {
			return err
		}
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

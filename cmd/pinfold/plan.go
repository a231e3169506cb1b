package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/planfile"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

func newPlanCmd() *cobra.Command {
	var (
		out  outputFlag
		file string
	)
	cmd := &cobra.Command{
		Use:   "plan -f FILE|-",
		Short: "Dry-run a deploy or a resize against hosts described in a file",
		Long: `Plan new instances (or one resize) offline, without a planner: how many
instances each host could take, which hosts get how many under the chosen
strategy, and which CPUs, pieces, NUMA node and memory each instance gets.
Nothing is changed anywhere; use it for capacity planning.

The file (JSON) holds "hosts" and either a "request" or a "resize"; see
docs/PLAN.md for every field. CPUs are worth share_base pieces (default 100):
a request of 1.7 CPUs bound gets 1 whole CPU plus 70 pieces of one more, and
an amount that is not a whole number of pieces (1.705) is refused (exit 2)
with the nearest ones.

Strategies: auto (level the service's counts), each (N on every host that can
take N), fill (top every host up to N, all or nothing), global (least used
share first), drained (smallest remaining capacity first).

Exit codes: 0 planned; 1 the request cannot be met (the error names what ran
out on which hosts); 2 invalid input (the message names the field and value).`,
		Example: `  pinfold plan -f plan.json
  pinfold plan -f plan.json -o json | jq .placements
  cat plan.json | pinfold plan -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if file == "" {
				return badInput("--file is required (a path, or - for standard input)")
			}
			r := cmd.InOrStdin()
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return badInput("--file %q: %v", file, errors.Unwrap(err))
				}
				defer f.Close()
				r = f
			}
			return runPlan(cmd.OutOrStdout(), r, out.json())
		},
	}
	out.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "plan file (JSON), or - for standard input")
	cmd.AddCommand(newPlanExportCmd())
	return cmd
}

func newPlanExportCmd() *cobra.Command {
	var (
		c    clientFlags
		file string
	)
	cmd := &cobra.Command{
		Use:   "export [-f FILE]",
		Short: "Write the live cluster's hosts and settings as a plan file",
		Long: `Write the hosts that may take work, as the planner's placement sees them
(capacity, usage, NUMA nodes, topology, memory-first quotas, properties and
domains), and the cluster's settings, as a plan file without a request. Add
a "request" (docs/PLAN.md) and 'pinfold plan -f FILE' places exactly what a
deploy of it would place now: plan, capacity and deploy share one capacity
function. The planner streams the file in pieces of a few hundred hosts;
export writes it once whole (nothing is written if the stream breaks).`,
		Example: `  pinfold plan export -f cluster.json
  pinfold plan export | jq '.request = {"service":"web","count":10,"cpu":1.5,"bind":true,"memory_bytes":1073741824}' | pinfold plan -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				plan, err := exportPlan(cmd.Context(), cl)
				if err != nil {
					return err
				}
				var buf bytes.Buffer
				if err := json.Indent(&buf, plan, "", "  "); err != nil {
					return fmt.Errorf("the planner's plan file: %w", err)
				}
				buf.WriteByte('\n')
				if file == "" || file == "-" {
					_, err := cmd.OutOrStdout().Write(buf.Bytes())
					return err
				}
				if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
					return badInput("--file %q: %v", file, errors.Unwrap(err))
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: add a \"request\" and run pinfold plan -f %s\n", file, file)
				return nil
			})
		},
	}
	c.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "-", "where to write the plan file; - for standard output")
	return cmd
}

func runPlan(w io.Writer, r io.Reader, asJSON bool) error {
	in, err := planfile.Decode(r)
	if err != nil {
		return &exitError{code: exitBadInput, err: err}
	}
	var o planfile.Output
	if in.Request != nil {
		res, err := placement.Plan(in.Params, in.Settings, in.Hosts, *in.Request)
		var pe *placement.Error
		switch {
		case errors.As(err, &pe) && pe.Invalid:
			return &exitError{code: exitBadInput, err: err}
		case errors.As(err, &pe):
			// The capacity column: the same function deploy and `pinfold
			// capacity` use (buffer, overbooking, rules).
			rooms, cerr := placement.Capacity(in.Params, in.Settings, in.Hosts, *in.Request)
			if cerr != nil {
				return &exitError{code: exitBadInput, err: cerr}
			}
			caps := map[string]int{}
			total := 0
			for name, r := range rooms {
				caps[name] = r.Count
				total += r.Count
			}
			o = planfile.NewOutput(in.Params, caps, total, nil, &planfile.OutputError{Error: pe.AllocError(), Eliminations: pe.Eliminations})
		case err != nil:
			return err
		default:
			o = planfile.NewOutput(in.Params, res.Capacity, res.TotalCapacity, res.Placements, nil)
			o.DomainSpread, o.Violations = string(res.Spread), res.Violations
		}
	} else {
		h := in.Hosts[slices.IndexFunc(in.Hosts, func(h *placement.Host) bool { return h.Name == in.Resize.Host })]
		pl, err := alloc.PlanResize(in.Params, h.Resources, *in.Resize)
		var ae *alloc.Error
		switch {
		case errors.As(err, &ae) && ae.Code == alloc.CodeInvalid:
			return &exitError{code: exitBadInput, err: err}
		case errors.As(err, &ae):
			o = planfile.NewOutput(in.Params, nil, 0, nil, &planfile.OutputError{Error: ae})
		case err != nil:
			return err
		default:
			o = planfile.NewOutput(in.Params, nil, 0, []alloc.Placement{pl}, nil)
		}
	}
	if y, ok := w.(yamlOut); ok && asJSON {
		// -o yaml: the same document as -o json, as YAML.
		var buf bytes.Buffer
		if err := o.WriteJSON(&buf); err != nil {
			return err
		}
		b, err := yaml.JSONToYAML(buf.Bytes())
		if err != nil {
			return err
		}
		if _, err := y.Writer.Write(append([]byte("---\n"), b...)); err != nil {
			return err
		}
	} else if asJSON {
		if err := o.WriteJSON(w); err != nil {
			return err
		}
	} else {
		bw := bufio.NewWriterSize(w, 1<<16) // a large plan is thousands of lines: one write each would dominate
		if err := printPlan(bw, in, o); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
	}
	if o.Error != nil {
		return &exitError{code: exitUnmet, err: o.Error.Error}
	}
	return nil
}

func printPlan(w io.Writer, in *planfile.Input, o planfile.Output) error {
	sb := in.Params.ShareBase
	newOn := map[string]int{}
	for _, p := range o.Placements {
		newOn[p.Host]++
	}
	if in.Request != nil {
		fmt.Fprintf(w, "Request: %d × %s of %s CPUs (%s), %s memory, strategy %s\n\n", in.Request.Count, in.Request.Service,
			alloc.FormatPieces(in.Request.Pieces, sb), bindWord(in.Request.Bind), formatBytes(in.Request.MemoryBytes), in.Request.Strategy)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tCAPACITY\tEXISTING\tNEW")
		for _, h := range in.Hosts {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", h.Name, o.Capacity[h.Name], h.Resources.Instances[in.Request.Service], newOn[h.Name])
		}
		fmt.Fprintf(tw, "total\t%d\t\t%d\n", o.TotalCapacity, len(o.Placements))
		if err := tw.Flush(); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "Resize on host %s: %s CPUs, %+d bytes, %s after\n", in.Resize.Host,
			signed(alloc.FormatPieces(in.Resize.CPUDelta, sb)), in.Resize.MemoryDelta, bindWord(in.Resize.Bind))
	}
	if o.Error != nil {
		fmt.Fprintf(w, "\nNOT PLACED (%s): %s\n", o.Error.Code, o.Error.Message)
		return printEliminations(w, o.Error.Eliminations)
	}
	if o.DomainSpread != "" {
		fmt.Fprintf(w, "\nFault and upgrade domains: %s rule\n", o.DomainSpread)
	}
	for _, v := range o.Violations {
		fmt.Fprintf(w, "WARNING: soft rule %s gave way: %s\n", v.Rule, v.Detail)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tHOST\tNUMA NODE\tCPUS (id:pieces)\tCPU QUOTA\tMEMORY")
	for i, p := range o.Placements {
		quota := o.Quota(p)
		if quota == "" {
			quota = "-"
		}
		numa := "cross"
		if p.NUMANode >= 0 {
			numa = fmt.Sprint(p.NUMANode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i+1, p.Host, numa, orDash(cpuPieces(p.CPUs)), quota, formatBytes(p.Memory))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(o.Placements) == 0 || len(o.Placements[0].CPUs) == 0 {
		return nil
	}
	byHost := map[string][]int{} // host → the numbers of its new instances, in order
	for i, p := range o.Placements {
		byHost[p.Host] = append(byHost[p.Host], i)
	}
	var resized map[cpuset.CPUID]int // a resize's instance, before: in used, and #1 after
	if in.Resize != nil {
		resized = in.Resize.Current.CPUs
	}
	for _, h := range in.Hosts {
		if len(byHost[h.Name]) > 0 {
			printCPUMap(w, h.Resources, o.Placements, byHost[h.Name], sb, resized)
		}
	}
	return nil
}

// printEliminations is the elimination report (seed 001): rule by rule, in
// the order applied, which hosts each removed.
func printEliminations(w io.Writer, es []placement.Elimination) error {
	if len(es) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nElimination sequence (rules in the order applied):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tELIMINATED\tHOSTS")
	for _, e := range es {
		hosts := strings.Join(e.Hosts, " ")
		if len(e.Hosts) > 20 {
			hosts = strings.Join(e.Hosts[:20], " ") + fmt.Sprintf(" … and %d more", len(e.Hosts)-20)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", e.Rule, len(e.Hosts), orDash(hosts))
	}
	return tw.Flush()
}

// printCPUMap prints, per NUMA node, who holds how many pieces of each of
// host h's CPUs: what was held before the plan, and the new instances mine
// (indexes into pls). For a resize, resized is the instance's CPUs before
// it, which the host's use counts: they are shown as #1, at its new size.
func printCPUMap(w io.Writer, h *alloc.Host, pls []alloc.Placement, mine []int, sb int, resized map[cpuset.CPUID]int) {
	legend := "used = held before this plan, #N = new instance N"
	if resized != nil {
		legend = "used = held by the others, #1 = the resized instance after the resize"
	}
	fmt.Fprintf(w, "\nCPU map of %s (%d pieces per CPU; %s):\n", h.Name, sb, legend)
	holders := map[cpuset.CPUID][]string{}
	for _, i := range mine {
		p := pls[i]
		for _, id := range slices.Sorted(maps.Keys(p.CPUs)) {
			holders[id] = append(holders[id], fmt.Sprintf("#%d %d", i+1, p.CPUs[id]))
		}
	}
	groups := h.NUMANodes
	if len(groups) == 0 {
		var ids []cpuset.CPUID
		for _, c := range h.CPUs {
			ids = append(ids, c.ID)
		}
		groups = []alloc.NUMANode{{ID: -1, CPUs: cpuset.Of(ids...)}}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NUMA NODE\tCPU\tHOLDERS\tFREE")
	for _, g := range groups {
		label := fmt.Sprint(g.ID)
		if g.ID < 0 {
			label = "-"
		}
		for _, c := range h.CPUs {
			if !g.CPUs.Contains(c.ID) {
				continue
			}
			parts := []string{}
			used := max(c.Used-resized[c.ID], 0)
			if used > 0 {
				parts = append(parts, fmt.Sprintf("used %d", used))
			}
			parts = append(parts, holders[c.ID]...)
			free := c.Capacity - used
			for _, hld := range holders[c.ID] {
				var n, v int
				fmt.Sscanf(hld, "#%d %d", &n, &v)
				free -= v
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", label, c.ID, orDash(strings.Join(parts, ", ")), free)
		}
	}
	_ = tw.Flush()
}

func cpuPieces(m map[cpuset.CPUID]int) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d:%d", id, m[id]))
	}
	return strings.Join(parts, " ")
}

func bindWord(b bool) string {
	if b {
		return "bound"
	}
	return "memory-first"
}

// exportPlan is the planner's plan file: the pieces ExportPlan streams,
// concatenated. A stream that ends in an error gives no file.
func exportPlan(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient) ([]byte, error) {
	stream, err := cl.ExportPlan(ctx, connect.NewRequest(&pinfoldv1.ExportPlanRequest{}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var plan []byte
	for stream.Receive() {
		plan = append(plan, stream.Msg().PlanJson...)
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return plan, nil
}

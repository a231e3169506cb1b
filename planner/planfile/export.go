package planfile

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
)

// Export is the plan file of hosts as the placement rules see them, with
// the cluster's settings and no request (`pinfold plan export`: the live
// cluster, to plan against offline). Decoding it gives the same hosts, so a
// plan of it places exactly what a deploy would. Pure.
func Export(p alloc.Params, s placement.Settings, hosts []*placement.Host) *File {
	sb, mfc := p.ShareBase, p.MaxFragmentCores
	f := &File{ShareBase: &sb, MaxFragmentCores: &mfc, BufferPercent: s.Buffer, OverbookingPercent: s.Overbooking}
	if len(s.Priorities) > 0 {
		f.ConstraintPriorities = map[string]int{}
		for k, v := range s.Priorities {
			f.ConstraintPriorities[k] = int(v)
		}
	}
	order := slices.Clone(hosts)
	slices.SortFunc(order, func(a, b *placement.Host) int { return strings.Compare(a.Name, b.Name) })
	for _, ph := range order {
		f.Hosts = append(f.Hosts, ExportHost(ph))
	}
	return f
}

// ExportHost is one host of Export's file: a host's entry, so that a file
// can be written a batch of hosts at a time. Pure.
func ExportHost(ph *placement.Host) Host {
	r := ph.Resources
	fh := Host{Name: ph.Name, Topology: r.Topology, Instances: maps.Clone(r.Instances), HostType: ph.Type,
		FaultDomain: ph.FaultDomain, UpgradeDomain: ph.UpgradeDomain, Disabled: ph.Disabled, Maintenance: ph.Maintenance}
	if ph.LoadAvg != 0 {
		l := ph.LoadAvg
		fh.LoadAvg = &l
	}
	fh.Capacity.MemoryBytes, fh.Used.MemoryBytes = r.MemoryBytes, r.MemoryUsed
	for _, c := range r.CPUs {
		k := strconv.Itoa(int(c.ID))
		fh.Capacity.CPUs = append(fh.Capacity.CPUs, Piece{k, c.Capacity})
		if c.Used != 0 {
			fh.Used.CPUs = append(fh.Used.CPUs, Piece{k, c.Used})
		}
	}
	for _, n := range r.NUMANodes {
		id := int(n.ID)
		fh.NUMANodes = append(fh.NUMANodes, NUMANode{&id, n.CPUs.String(), n.MemoryBytes})
		if n.MemoryUsed != 0 {
			if fh.Used.NUMAMemoryBytes == nil {
				fh.Used.NUMAMemoryBytes = map[string]int64{}
			}
			fh.Used.NUMAMemoryBytes[strconv.Itoa(id)] = n.MemoryUsed
		}
	}
	for q, n := range r.MemoryFirst {
		if fh.Used.MemoryFirstQuotas == nil {
			fh.Used.MemoryFirstQuotas = map[string]int{}
		}
		fh.Used.MemoryFirstQuotas[strconv.Itoa(q)] = n
	}
	if len(ph.Properties) > 0 {
		fh.Properties = map[string]any{}
		for k, v := range ph.Properties {
			switch v.Kind {
			case placement.Bool:
				fh.Properties[k] = v.B
			case placement.Int:
				fh.Properties[k] = json.Number(strconv.FormatInt(v.I, 10))
			default:
				fh.Properties[k] = v.S
			}
		}
	}
	return fh
}

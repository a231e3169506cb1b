package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/numa"
	"github.com/pinfold/pinfold/planner/topology"
)

func newTopologyCmd() *cobra.Command {
	var (
		out       outputFlag
		sysfsRoot string
		procRoot  string
	)
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Show this host's CPU and NUMA topology as discovered from sysfs",
		Long: `Discover the host's topology from sysfs and print it: NUMA nodes with their
CPUs, memory and distances, physical cores with their SMT siblings, L3 cache
groups, and the online and isolated CPUs.

The JSON form (-o json) is what 'pinfold host add --topology FILE' takes.

A host without devices/system/node (NUMA disabled, many VMs) is shown as one
NUMA node holding every online CPU, with MemTotal from <proc-root>/meminfo,
and "numa_source": "flat".`,
		Example: `  pinfold topology
  pinfold topology -o json > host.json
  pinfold topology --sysfs-root numa/testdata/sysfs/dual-xeon-gold-6230
  pinfold topology --sysfs-root numa/testdata/sysfs/flat-vm --proc-root numa/testdata/proc/flat-vm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			for flag, dir := range map[string]string{"--sysfs-root": sysfsRoot, "--proc-root": procRoot} {
				if st, err := os.Stat(dir); err != nil || !st.IsDir() {
					return badInput("%s %q: not a readable directory", flag, dir)
				}
			}
			t, err := numa.Discover(os.DirFS(sysfsRoot), os.DirFS(procRoot))
			if err != nil {
				return badInput("%s (sysfs root %q)", err, sysfsRoot)
			}
			if out.json() {
				return writeJSON(cmd.OutOrStdout(), t)
			}
			return printTopology(cmd.OutOrStdout(), t)
		},
	}
	out.register(cmd)
	cmd.Flags().StringVar(&sysfsRoot, "sysfs-root", "/sys", "root of the sysfs tree to read (a captured tree works too)")
	cmd.Flags().StringVar(&procRoot, "proc-root", "/proc", "root of procfs, read for MemTotal on hosts without NUMA information")
	return cmd
}

func printTopology(w io.Writer, t *topology.Topology) error {
	cores := t.Cores()
	fmt.Fprintf(w, "Host: %d packages, %d physical cores, %d online CPUs (%s), %d NUMA nodes (from %s), %d L3 groups, %s memory\n",
		len(t.Packages()), len(cores), len(t.CPUs), t.Online, len(t.NUMANodes), t.NUMASource, len(t.L3Groups()), formatBytes(t.MemoryBytes()))
	fmt.Fprintf(w, "Isolated CPUs: %s\n\n", orDash(t.Isolated.String()))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NUMA NODE\tCPUS\tMEMORY\tDISTANCES")
	for _, n := range t.NUMANodes {
		var d []string
		for _, to := range slices.Sorted(maps.Keys(n.Distances)) {
			d = append(d, fmt.Sprintf("%d:%d", to, n.Distances[to]))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", n.ID, orDash(n.CPUs.String()), formatBytes(n.MemoryBytes), strings.Join(d, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CORE\tPACKAGE\tDIE\tCORE_ID\tNUMA NODE\tSIBLINGS\tL3 GROUP")
	for _, c := range cores {
		cpu, _ := t.CPU(c.ID)
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t%s\n", c.ID, cpu.PackageID, cpu.DieID, cpu.CoreID, cpu.NUMANode, c.CPUs, orDash(cpu.L3.String()))
	}
	return tw.Flush()
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"testing"
)

// planFile10k is a plan file of 10,000 hosts of 128 CPUs in 2 NUMA nodes
// (512 GiB, 1.3 CPUs and 1 GiB already used on each) and a request for
// 100,000 instances of 1.3 CPUs and 1 GiB, bound or memory-first (about
// 15 MiB).
func planFile10k(bind bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"share_base": 100, "max_fragment_cores": -1, "hosts": [`)
	for i := range 10000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name": "host-%05d", "capacity": {"cpus": {`, i)
		for c := range 128 {
			if c > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"` + strconv.Itoa(c) + `": 100`)
		}
		fmt.Fprintf(&b, `}, "memory_bytes": %d}, "used": {"cpus": {"0": 100, "1": 30}, "memory_bytes": 1073741824}, `+
			`"numa_nodes": [{"id": 0, "cpus": "0-63", "memory_bytes": %d}, {"id": 1, "cpus": "64-127", "memory_bytes": %d}]}`, int64(512)<<30, int64(256)<<30, int64(256)<<30)
	}
	fmt.Fprintf(&b, `], "request": {"service": "web", "count": 100000, "cpu": 1.3, "bind": %v, "memory_bytes": 1073741824}}`, bind)
	return b.Bytes()
}

// BenchmarkPlanCommand10kHosts: `pinfold plan -o json` as the command runs
// it (decode, validate, plan, write the JSON) on planFile10k; the process
// start adds some milliseconds (docs/BENCHMARKS.md times the binary too).
func BenchmarkPlanCommand10kHosts(b *testing.B) {
	for _, bind := range []bool{true, false} {
		name := map[bool]string{true: "bound", false: "memory-first"}[bind]
		file := planFile10k(bind)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(file)))
			for b.Loop() {
				if err := runPlan(io.Discard, bytes.NewReader(file), true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

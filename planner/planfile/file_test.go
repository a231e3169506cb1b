package planfile_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/planfile"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

const fileSeed = `{"share_base": 100, "hosts": [{"name": "h1", "capacity": {"cpus": {"0": 100, "1": 100}, "memory_bytes": 4294967296},
 "numa_nodes": [{"id": 0, "cpus": "0-1", "memory_bytes": 4294967296}]}],
 "request": {"service": "web", "count": 1, "cpu": 1.5, "memory_bytes": 1048576}}`

func TestDecodeFileBothOrNeither(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{strings.Replace(fileSeed, `"request"`, `"requestx"`, 1), `unknown field "requestx"`},
		{`{"hosts": [{"name": "h1", "capacity": {"cpus": {"0": 100}, "memory_bytes": 1}}]}`, "needs a request or a resize"},
		{`{"hosts": []}`, "hosts = []"},
		{fileSeed + `{}`, "trailing data"},
		{fileSeed + "}", `trailing data after the JSON object (line 3: "}")`},
		{fileSeed + "\n]\n", `trailing data after the JSON object (line 4: "]")`},
		{``, "empty"},
		{strings.Replace(fileSeed, `"name": "h1"`, `"name": "a b"`, 1), `hosts[0].name = "a b"`},
		{strings.Replace(fileSeed, `"1": 100`, `"0": 50`, 1), `hosts["h1"].capacity.cpus = 0: CPU 0 is given twice`},
		{strings.Replace(fileSeed, `"1": 100`, `"01": 100`, 1), `hosts["h1"].capacity.cpus["01"] = "01": a CPU id must be a decimal number`},
		{strings.Replace(fileSeed, `"1": 100`, `"+1": 100`, 1), `capacity.cpus["+1"] = "+1"`},
		{strings.Replace(fileSeed, `"1": 100`, `"1": 1.5`, 1), `hosts.capacity.cpus: got a JSON number 1.5, want int`},
		{strings.Replace(fileSeed, `"memory_bytes": 4294967296},`, `"memory_bytes": 4294967296}, "used": {"cpus": {"1": 10, "1": 20}},`, 1), `hosts["h1"].used.cpus["1"] = 20: CPU 1 is given twice`},
	} {
		_, err := planfile.Decode(strings.NewReader(tt.in))
		var ae *alloc.Error
		if !errors.As(err, &ae) || ae.Code != alloc.CodeInvalid || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode error = %v, want invalid with %q", err, tt.want)
		}
	}
}

// FuzzDecodeFile: any input gives a valid Input or an *Error, and a valid
// Input can be planned without panicking.
func FuzzDecodeFile(f *testing.F) {
	f.Add(fileSeed)
	f.Add(strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": -3`, 1))
	f.Add(`{"hosts": [{"name": "h", "capacity": {"cpus": {"0": 300}, "memory_bytes": 9}}], "resize": {"host": "h", "current": {"cpus": {"0": 50}, "memory_bytes": 1}, "cpu_delta": 1}}`)
	f.Fuzz(func(t *testing.T, s string) {
		in, err := planfile.Decode(strings.NewReader(s))
		if err != nil {
			var ae *alloc.Error
			if !errors.As(err, &ae) || ae.Code != alloc.CodeInvalid {
				t.Fatalf("Decode error %T %v is not an invalid-argument *Error", err, err)
			}
			return
		}
		if in.Request != nil {
			if in.Request.Count > 1000 {
				return
			}
			_, _ = placement.Plan(in.Params, in.Settings, in.Hosts, *in.Request)
		} else {
			for _, h := range in.Hosts {
				if h.Name == in.Resize.Host {
					_, _ = alloc.PlanResize(in.Params, h.Resources, *in.Resize)
				}
			}
		}
	})
}

// TestExportRoundTrip: hosts exported as a plan file decode to the same
// hosts (engine view, properties, domains, memory-first quotas), so
// planning the file is planning the cluster.
func TestExportRoundTrip(t *testing.T) {
	t.Parallel()
	tp := topologytest.DualXeonGold6230().Topology()
	res := &alloc.Host{Name: "x", MemoryBytes: 64 << 30, MemoryUsed: 3 << 30, Topology: tp, Instances: map[string]int{"web": 2},
		MemoryFirst: map[int]int{300: 1, 50: 2}}
	for _, c := range tp.CPUs {
		res.CPUs = append(res.CPUs, alloc.CPU{ID: c.ID, Capacity: 150, Used: int(c.ID) % 3 * 40})
	}
	for _, n := range tp.NUMANodes {
		res.NUMANodes = append(res.NUMANodes, alloc.NUMANode{ID: n.ID, CPUs: n.CPUs, MemoryBytes: 32 << 30, MemoryUsed: 1 << 30})
	}
	hosts := []*placement.Host{{Name: "x", Type: "big", FaultDomain: "fd:/dc1/r2", UpgradeDomain: "UD1", Maintenance: true, LoadAvg: 1.5,
		Properties: map[string]placement.Value{"disk": placement.Str("ssd"), "gen": placement.IntVal(1 << 60), "gpu": placement.BoolVal(true)}, Resources: res}}
	settings := placement.Settings{Buffer: map[string]float64{"cpu": 0.2}, Priorities: map[placement.Rule]placement.Priority{placement.RuleUpgradeDomain: placement.Soft}}
	f := planfile.Export(alloc.Params{ShareBase: 100, MaxFragmentCores: 4}, settings, hosts)
	cpu, bind := planfile.CPUAmount(1), true
	f.Request = &planfile.Request{Service: "s", Count: 1, CPU: &cpu, Bind: &bind, MemoryBytes: 1 << 30}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	in, err := planfile.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the exported file does not decode: %v", err)
	}
	if diff := cmp.Diff(hosts, in.Hosts, cmpopts.IgnoreUnexported(alloc.Host{})); diff != "" {
		t.Errorf("hosts after the round trip (-exported +decoded):\n%s", diff)
	}
	if in.Params.MaxFragmentCores != 4 || in.Settings.Buffer["cpu"] != 0.2 || in.Settings.Priorities[placement.RuleUpgradeDomain] != placement.Soft {
		t.Errorf("params %+v, settings %+v", in.Params, in.Settings)
	}
}

// TestDecodeCPUAmount: CPU amounts are JSON numbers, as plan export and
// ps -o json write them; a quoted decimal ("1.7", as older versions wrote
// them) is read too; anything else is refused naming the field.
func TestDecodeCPUAmount(t *testing.T) {
	t.Parallel()
	resize := `{"hosts": [{"name": "h", "capacity": {"cpus": {"0": 300, "1": 300}, "memory_bytes": 1073741824}}],
 "resize": {"host": "h", "current": {"cpus": {}, "bind": false, "cpu_quota": QUOTA, "memory_bytes": 1}, "cpu_delta": DELTA}}`
	for _, tt := range []struct {
		name, in  string
		wantCPU   int // request pieces
		wantQuota int // resize current quota pieces
		wantDelta int
		wantErr   string
	}{
		{name: "number", in: strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": 1.7`, 1), wantCPU: 170},
		{name: "quoted", in: strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": "1.7"`, 1), wantCPU: 170},
		{name: "quoted zero memory-first", in: strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": "0", "bind": false`, 1), wantCPU: 0},
		{name: "resize quoted", in: strings.NewReplacer("QUOTA", `"0.5"`, "DELTA", `"-0.25"`).Replace(resize), wantQuota: 50, wantDelta: -25},
		{name: "resize numbers", in: strings.NewReplacer("QUOTA", `0.5`, "DELTA", `1.25`).Replace(resize), wantQuota: 50, wantDelta: 125},
		{name: "not a number", in: strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": "lots"`, 1), wantErr: `request.cpu: got a JSON string "lots", want float64`},
		{name: "NaN", in: strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": "NaN"`, 1), wantErr: `request.cpu: got a JSON string "NaN"`},
		{name: "hex", in: strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": "0x1p1"`, 1), wantErr: `request.cpu: got a JSON string "0x1p1"`},
		{name: "bool", in: strings.Replace(fileSeed, `"cpu": 1.5`, `"cpu": true`, 1), wantErr: `request.cpu: got a JSON bool, want float64`},
		// A refused delta is named with its sign, as the file has it.
		{name: "delta off the grid", in: strings.NewReplacer("QUOTA", `0.5`, "DELTA", `-0.255`).Replace(resize),
			wantErr: `resize.cpu_delta = -0.255: not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are -0.25 and -0.26`},
		{name: "delta below a piece", in: strings.NewReplacer("QUOTA", `0.5`, "DELTA", `-0.001`).Replace(resize), wantErr: `resize.cpu_delta = -0.001: less than one piece`},
		{name: "delta word", in: strings.NewReplacer("QUOTA", `0.5`, "DELTA", `"more"`).Replace(resize), wantErr: `resize.cpu_delta: got a JSON string "more"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in, err := planfile.Decode(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				var ae *alloc.Error
				if !errors.As(err, &ae) || ae.Code != alloc.CodeInvalid || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode error = %v, want invalid with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case in.Request != nil && in.Request.Pieces != tt.wantCPU:
				t.Errorf("request pieces = %d, want %d", in.Request.Pieces, tt.wantCPU)
			case in.Resize != nil && (in.Resize.Current.CPUQuota != tt.wantQuota || in.Resize.CPUDelta != tt.wantDelta):
				t.Errorf("resize quota %d delta %d, want %d %d", in.Resize.Current.CPUQuota, in.Resize.CPUDelta, tt.wantQuota, tt.wantDelta)
			}
		})
	}
}

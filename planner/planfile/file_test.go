package planfile_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/planfile"
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

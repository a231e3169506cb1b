package planfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// fleetOpts shapes genFleet's file.
type fleetOpts struct {
	hosts int
	// plain: only fields the streaming decoder reads itself (no topology,
	// properties, load_avg or memory-first quotas).
	plain  bool
	bind   bool
	indent bool
}

// genFleet is a random plan file: hosts of 4 to 128 CPUs (ids in random
// order, some oversold, some used), one or two NUMA nodes, running
// instances, domains; unless plain, some hosts carry a topology,
// properties, a load average or memory-first quotas.
func genFleet(rng *rand.Rand, o fleetOpts) []byte {
	sb := 100
	f := File{ShareBase: &sb}
	for i := range o.hosts {
		var h Host
		h.Name = fmt.Sprintf("host-%04d", i)
		var ids []cpuset.CPUID
		if !o.plain && rng.IntN(8) == 0 {
			tp := topologytest.DualXeonGold6230().Topology()
			h.Topology = tp
			for _, c := range tp.CPUs {
				ids = append(ids, c.ID)
			}
			for _, n := range tp.NUMANodes {
				id := int(n.ID)
				h.NUMANodes = append(h.NUMANodes, NUMANode{&id, n.CPUs.String(), 32 << 30})
			}
			h.Capacity.MemoryBytes = 64 << 30
		} else {
			n := []int{4, 8, 16, 64, 128}[rng.IntN(5)]
			for c := range n {
				ids = append(ids, cpuset.CPUID(c))
			}
			h.Capacity.MemoryBytes = int64(n) << 32
			if rng.IntN(3) > 0 {
				half := n / 2
				id0, id1 := 0, 1
				h.NUMANodes = []NUMANode{{&id0, fmt.Sprintf("0-%d", half-1), int64(half) << 32}, {&id1, fmt.Sprintf("%d-%d", half, n-1), int64(half) << 32}}
				if rng.IntN(2) == 0 {
					h.Used.NUMAMemoryBytes = map[string]int64{"0": 1 << 30}
				}
			}
		}
		rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
		for _, id := range ids {
			capacity := []int{100, 100, 100, 200, 150}[rng.IntN(5)]
			h.Capacity.CPUs = append(h.Capacity.CPUs, Piece{strconv.Itoa(int(id)), capacity})
			if rng.IntN(4) == 0 {
				h.Used.CPUs = append(h.Used.CPUs, Piece{strconv.Itoa(int(id)), rng.IntN(capacity + 1)})
			}
		}
		h.Used.MemoryBytes = int64(rng.IntN(4)) << 30
		if rng.IntN(2) == 0 {
			h.Instances = map[string]int{"web": rng.IntN(5), "db": rng.IntN(2)}
		}
		if rng.IntN(3) == 0 {
			h.FaultDomain, h.UpgradeDomain, h.HostType = fmt.Sprintf("fd:/dc1/r%d", i%4), fmt.Sprintf("UD%d", i%3), "big"
		}
		h.Maintenance = rng.IntN(40) == 0
		if !o.plain {
			if rng.IntN(6) == 0 {
				h.Properties = map[string]any{"HasSSD": rng.IntN(2) == 0, "gen": json.Number(strconv.Itoa(rng.IntN(9)))}
			}
			if rng.IntN(6) == 0 {
				l := float64(rng.IntN(40)) / 4
				h.LoadAvg = &l
			}
			if rng.IntN(6) == 0 {
				h.Used.MemoryFirstQuotas = map[string]int{"50": 2}
			}
		}
		f.Hosts = append(f.Hosts, h)
	}
	cpu, bind := CPUAmount([]float64{1.3, 0.5, 2, 1}[rng.IntN(4)]), o.bind
	f.Request = &Request{Service: "web", Count: 1 + rng.IntN(3*o.hosts), CPU: &cpu, Bind: &bind, MemoryBytes: 1 << 30}
	var b []byte
	var err error
	if o.indent {
		b, err = json.MarshalIndent(f, "", "  ")
	} else {
		b, err = json.Marshal(f)
	}
	if err != nil {
		panic(err)
	}
	return b
}

// sameInput compares Inputs field by field, unexported ones too.
var sameInput = cmp.Exporter(func(reflect.Type) bool { return true })

// checkStream: where decodeStream takes b, decoding it whole gives the
// same Input; either way Decode gives what decoding it whole gives.
func checkStream(t *testing.T, b []byte) (taken bool) {
	t.Helper()
	in, ok := decodeStream(b)
	want, werr := decodeWhole(b)
	if ok {
		if werr != nil {
			t.Fatalf("decodeStream took a file decoding it whole refuses (%v):\n%.300s", werr, b)
		}
		if diff := cmp.Diff(want, in, sameInput); diff != "" {
			t.Fatalf("decodeStream differs from the whole decode (-whole +stream):\n%s", diff)
		}
	}
	got, gerr := Decode(bytes.NewReader(b))
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("Decode error %v, decoding whole %v", gerr, werr)
	}
	if diff := cmp.Diff(want, got, sameInput); diff != "" {
		t.Fatalf("Decode differs from the whole decode (-whole +Decode):\n%s", diff)
	}
	return ok
}

// TestStreamIsWhole: the streaming decoder gives exactly the Input the
// whole decode gives, on random fleets compact and indented, and leaves to
// the whole decode (which names the error, as before) every file it does
// not read as encoding/json does.
func TestStreamIsWhole(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(27, 2))
	for i := range 60 {
		o := fleetOpts{hosts: 1 + rng.IntN(40), plain: i%2 == 0, bind: i%3 != 0, indent: i%4 < 2}
		b := genFleet(rng, o)
		if !checkStream(t, b) {
			t.Fatalf("file %d (%+v): not taken by the streaming decoder", i, o)
		}
	}
	seed := `{"share_base": 100, "hosts": [{"name": "h1", "capacity": {"cpus": {"0": 100, "1": 100}, "memory_bytes": 4294967296},
 "used": {"cpus": {"1": 30}, "memory_bytes": 1, "numa_memory_bytes": {"0": 1}}, "instances": {"web": 1},
 "numa_nodes": [{"id": 0, "cpus": "0-1", "memory_bytes": 4294967296}]}],
 "request": {"service": "web", "count": 1, "cpu": 1.5, "memory_bytes": 1048576}}`
	for _, tt := range []struct {
		name  string
		in    string
		taken bool // the streaming decoder reads it itself
	}{
		{"seed", seed, true},
		{"resize", `{"hosts": [{"name": "h", "capacity": {"cpus": {"0": 300}, "memory_bytes": 9}}], "resize": {"host": "h", "current": {"cpus": {"0": 50}, "memory_bytes": 1}, "cpu_delta": 1}}`, true},
		{"settings after hosts", strings.Replace(seed, `"share_base": 100, `, ``, 1)[:len(seed)-len(`"share_base": 100, `)-1] + `, "share_base": 1000, "buffer_percent": {"cpu": 0.1}}`, true},
		{"no whitespace", strings.NewReplacer(" ", "", "\n", "").Replace(seed), true},
		{"key spelt otherwise", strings.Replace(seed, `"hosts"`, `"Hosts"`, 1), false},
		{"host key spelt otherwise", strings.Replace(seed, `"name"`, `"NAME"`, 1), true}, // this host alone by encoding/json
		{"escaped key", strings.Replace(seed, `"hosts"`, `"ho\u0073ts"`, 1), false},
		{"escaped name", strings.Replace(seed, `"h1"`, `"h\u0031"`, 1), true}, // this host alone by encoding/json
		{"duplicate top-level key", strings.Replace(seed, `"share_base": 100`, `"share_base": 100, "share_base": 10`, 1), false},
		{"duplicate host key", strings.Replace(seed, `"name": "h1"`, `"name": "h0", "name": "h1"`, 1), true}, // this host alone by encoding/json
		{"duplicate CPU", strings.Replace(seed, `"1": 100`, `"1": 100, "1": 50`, 1), false},
		{"duplicate instance", strings.Replace(seed, `{"web": 1}`, `{"web": 1, "web": 2}`, 1), true}, // this host alone by encoding/json
		{"fraction", strings.Replace(seed, `"1": 100`, `"1": 1.5`, 1), false},
		{"exponent", strings.Replace(seed, `"memory_bytes": 1,`, `"memory_bytes": 1e3,`, 1), false},
		{"leading zero", strings.Replace(seed, `"memory_bytes": 1,`, `"memory_bytes": 01,`, 1), false},
		{"null used", strings.Replace(seed, `"used": {"cpus": {"1": 30}, "memory_bytes": 1, "numa_memory_bytes": {"0": 1}}`, `"used": null`, 1), true},
		{"null cpus", strings.Replace(seed, `"cpus": {"1": 30}`, `"cpus": null`, 1), true},
		{"trailing data", seed + `{}`, false},
		{"trailing brace", seed + `}`, false},
		{"no hosts", `{"hosts": [], "request": {"service": "web", "count": 1, "cpu": 1}}`, false},
		{"hosts null", `{"hosts": null, "request": {"service": "web", "count": 1, "cpu": 1}}`, false},
		{"bad host then bad syntax", strings.Replace(seed, `"h1"`, `"a b"`, 1)[:len(seed)-3], false},
		{"unknown host field", strings.Replace(seed, `"name": "h1"`, `"name": "h1", "colour": 1`, 1), false},
		{"unknown top-level field", strings.Replace(seed, `"share_base"`, `"share_bass"`, 1), false},
		{"bracket mismatch", strings.Replace(seed, `"memory_bytes": 4294967296}]}]`, `"memory_bytes": 4294967296}}}]`, 1), false},
		{"literal run on", strings.Replace(seed, `"count": 1,`, `"count": 1x,`, 1), false},
		{"bool run on", strings.Replace(seed, `"name": "h1"`, `"name": "h1", "disabled": truex`, 1), false},
		{"empty", ``, false},
		{"not an object", `[]`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if taken := checkStream(t, []byte(tt.in)); taken != tt.taken {
				t.Errorf("taken by the streaming decoder: %v, want %v", taken, tt.taken)
			}
		})
	}
}

// FuzzStreamIsWhole: on any input, a file the streaming decoder takes is
// one the whole decode takes, with the same Input.
func FuzzStreamIsWhole(f *testing.F) {
	f.Add([]byte(`{"share_base": 100, "hosts": [{"name": "h1", "capacity": {"cpus": {"0": 100, "1": 100}, "memory_bytes": 4294967296},
 "used": {"cpus": {"1": 30}, "memory_bytes": 1, "numa_memory_bytes": {"0": 1}}, "instances": {"web": 1}, "load_avg": 1.5,
 "numa_nodes": [{"id": 0, "cpus": "0-1", "memory_bytes": 4294967296}], "properties": {"a": 1}}],
 "request": {"service": "web", "count": 1, "cpu": 1.5, "memory_bytes": 1048576}}`))
	f.Add([]byte(`{"hosts":[{"name":"h","capacity":{"cpus":{"0":300},"memory_bytes":9},"used":null,"topology":null}],"resize":{"host":"h","current":{"cpus":{"0":50},"memory_bytes":1},"cpu_delta":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, ok := decodeStream(b)
		if !ok {
			return
		}
		want, err := decodeWhole(b)
		if err != nil {
			t.Fatalf("decodeStream took a file decoding it whole refuses: %v", err)
		}
		if diff := cmp.Diff(want, in, sameInput); diff != "" {
			t.Fatalf("(-whole +stream):\n%s", diff)
		}
	})
}

// TestDecodeHoldsOneHost: decoding a 2,000-host file allocates little more
// than the file and the engine's hosts: the file's form of the hosts is
// held one host at a time, and the file is read into one buffer of its
// size. Before, reading it (io.ReadAll) and decoding it whole allocated
// about 12 times the file.
func TestDecodeHoldsOneHost(t *testing.T) {
	b := genFleet(rand.New(rand.NewPCG(7, 7)), fleetOpts{hosts: 2000, plain: true, bind: true})
	allocated := func(decode func() (*Input, error)) uint64 {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		in, err := decode()
		runtime.ReadMemStats(&m1)
		if err != nil || len(in.Hosts) != 2000 {
			t.Fatalf("decode: %d hosts, %v", len(in.Hosts), err)
		}
		return m1.TotalAlloc - m0.TotalAlloc
	}
	stream := allocated(func() (*Input, error) { return Decode(bytes.NewReader(b)) })
	whole := allocated(func() (*Input, error) { return decodeWhole(b) })
	t.Logf("file %d bytes; allocated: streaming %d (%.1fx), whole %d (%.1fx)", len(b), stream, float64(stream)/float64(len(b)), whole, float64(whole)/float64(len(b)))
	if stream > 6*uint64(len(b)) {
		t.Errorf("Decode allocated %d bytes for a %d-byte file (%.1fx), want at most 6x", stream, len(b), float64(stream)/float64(len(b)))
	}
}

// randomOutput is an Output of random placements: bound ones with CPU ids
// from 0 to 199 (string order differs from numeric), memory-first ones
// with a quota, whole cores, soft limits, host ports, host names that
// encoding/json escapes.
func randomOutput(rng *rand.Rand, n, sb int) Output {
	names := []string{"h1", "host-0007", "a<b>&c", `q"uote`, "é", "tab\tbed"}
	var pls []alloc.Placement
	capacity := map[string]int{}
	for range n {
		p := alloc.Placement{Host: names[rng.IntN(len(names))]}
		capacity[p.Host] += 1
		p.NUMANode = cpuset.NUMANodeID(rng.IntN(3) - 1)
		p.Memory = rng.Int64N(1 << 40)
		switch rng.IntN(4) {
		case 0:
			p.CPUs = map[cpuset.CPUID]int{}
			p.CPUQuota = rng.IntN(10 * sb)
		case 1:
			p.CPUQuota = rng.IntN(10 * sb) // a nil map: "cpus": null
		default:
			p.Bind = true
			p.WholeCores = rng.IntN(4) == 0
			p.CPUs = map[cpuset.CPUID]int{}
			for range 1 + rng.IntN(6) {
				p.CPUs[cpuset.CPUID(rng.IntN(200))] = 1 + rng.IntN(sb)
			}
		}
		if rng.IntN(4) == 0 {
			p.MemorySoft = rng.Int64N(1 << 30)
		}
		if rng.IntN(10) == 0 {
			p.HostPorts = []model.Port{{Name: "http", Host: 20000 + rng.IntN(100), Container: 80}}
		}
		pls = append(pls, p)
	}
	o := NewOutput(alloc.Params{ShareBase: sb}, capacity, n, pls, nil)
	if rng.IntN(2) == 0 {
		o.DomainSpread, o.Violations = "adaptive", []placement.Violation{{Rule: "UpgradeDomain", Detail: "x<y"}}
	}
	return o
}

func (o Output) ref() refOutput {
	r := newRefOutput(alloc.Params{ShareBase: o.ShareBase}, o.Capacity, o.TotalCapacity, o.Placements, o.Error)
	r.DomainSpread, r.Violations = o.DomainSpread, o.Violations
	return r
}

// TestWriteJSONIsMarshal: placements written directly are the bytes
// json.Marshal gave each OutputPlacement (the reference writer).
func TestWriteJSONIsMarshal(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		o := randomOutput(rng, rng.IntN(30), []int{100, 1000, 3, 64}[i%4])
		var got, want bytes.Buffer
		if err := o.WriteJSON(&got); err != nil {
			t.Fatal(err)
		}
		if err := o.ref().WriteJSON(&want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.String(), got.String()); diff != "" {
			t.Fatalf("output %d (-reference +direct):\n%s", i, diff)
		}
	}
	// An invalid share base renders a quota that is no JSON number: both
	// refuse it.
	o := NewOutput(alloc.Params{ShareBase: 0}, nil, 1, []alloc.Placement{{Host: "h", Allocation: model.Allocation{CPUs: map[cpuset.CPUID]int{}, CPUQuota: 7}}}, nil)
	if err, ref := o.WriteJSON(&bytes.Buffer{}), o.ref().WriteJSON(&bytes.Buffer{}); err == nil || ref == nil {
		t.Errorf("quota %q: direct %v, reference %v; want both to fail", o.Quota(o.Placements[0]), err, ref)
	}
}

// TestWriteJSONAllocs: writing a plan's placements (one request: one
// quota; host names without escapes) allocates nothing per placement (the
// reference writer allocated at least two per placement: the marshalled
// line, and for a bound one its sorted keys).
func TestWriteJSONAllocs(t *testing.T) {
	var pls []alloc.Placement
	for i := range 1000 {
		p := alloc.Placement{Host: fmt.Sprintf("host-%03d", i%100), Allocation: model.Allocation{NUMANode: -1, Memory: 1 << 30, CPUs: map[cpuset.CPUID]int{}}}
		if i%2 == 0 {
			p.Bind, p.NUMANode, p.CPUs = true, 1, map[cpuset.CPUID]int{cpuset.CPUID(i % 128): 100, 127: 30}
		} else {
			p.CPUQuota = 130
		}
		pls = append(pls, p)
	}
	o := NewOutput(alloc.Params{ShareBase: 100}, map[string]int{"host-000": 10}, 1000, pls, nil)
	for _, w := range []struct {
		name  string
		write func() error
		max   float64
	}{
		{"direct", func() error { return o.WriteJSON(io.Discard) }, 100},
	} {
		allocs := testing.AllocsPerRun(5, func() {
			if err := w.write(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > w.max {
			t.Errorf("%s: WriteJSON of 1,000 placements: %.0f allocations, want at most %.0f", w.name, allocs, w.max)
		}
	}
}

// TestStreamedPlanIsWhole: `pinfold plan -o json` on a random fleet writes
// the same bytes streamed (Decode, WriteJSON) as decoded whole and written
// through encoding/json (the reference writer), bound and memory-first.
func TestStreamedPlanIsWhole(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 12 {
		b := genFleet(rng, fleetOpts{hosts: 50 + rng.IntN(200), plain: i%2 == 0, bind: i%3 != 0, indent: i%4 == 1})
		want, err := decodeWhole(b)
		if err != nil {
			t.Fatal(err)
		}
		in, err := Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var got, ref bytes.Buffer
		for _, run := range []struct {
			in  *Input
			out func(Output) error
		}{
			{in, func(o Output) error { return o.WriteJSON(&got) }},
			{want, func(o Output) error { return o.ref().WriteJSON(&ref) }},
		} {
			res, err := placement.Plan(run.in.Params, run.in.Settings, run.in.Hosts, *run.in.Request)
			var o Output
			if err != nil {
				o = NewOutput(run.in.Params, nil, 0, nil, &OutputError{Error: &alloc.Error{Code: "x", Message: err.Error()}})
			} else {
				o = NewOutput(run.in.Params, res.Capacity, res.TotalCapacity, res.Placements, nil)
				o.DomainSpread, o.Violations = string(res.Spread), res.Violations
			}
			if err := run.out(o); err != nil {
				t.Fatal(err)
			}
		}
		if got.String() != ref.String() {
			t.Fatalf("fleet %d: streamed output differs from the whole one:\n%s", i, cmp.Diff(ref.String(), got.String()))
		}
	}
}

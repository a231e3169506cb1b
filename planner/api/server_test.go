package api

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

func TestPieces(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		neg     bool
		want    int
		wantErr string
	}{
		{"1.7", false, 170, ""}, {"0.29", false, 29, ""}, {"", false, 0, ""}, {" 2 ", false, 200, ""},
		{"-0.5", true, -50, ""}, {"-0.5", false, 0, "must not be negative"},
		// Go's other float syntax is no CPU amount: "1_0" was 10 CPUs,
		// "0x1p-1" half of one.
		{"1_0", false, 0, `cpu = "1_0": not a decimal number of CPUs`}, {"0x1p-1", true, 0, `cpu = "0x1p-1": not a decimal number of CPUs`},
		{"1.7e0", false, 170, ""}, {"+.5", true, 50, ""},
		{"1.5.3", false, 0, "not a decimal"}, {"NaN", false, 0, "not a decimal number of CPUs"}, {"1e9", false, 0, "want a number of CPUs"},
	} {
		got, err := pieces("cpu", tt.in, 100, tt.neg)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("pieces(%q) error = %v, want invalid argument %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("pieces(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// TestRequestPieces: a refused CPU amount is named as it was written, once
// (cpu = "1e9", not also 1e+09; cpu = "0.0001", not "0").
func TestRequestPieces(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		bind    bool
		want    int
		wantErr string
	}{
		{"1.7", true, 170, ""}, {"0", false, 0, ""}, {"0.29", true, 29, ""},
		{"0.0001", false, 0, `cpu = "0.0001": less than one piece of a CPU (1 piece = 0.01 CPU at share base 100): the smallest amount above 0 is 0.01`},
		{"0.0001", true, 0, `cpu = "0.0001": less than one piece of a CPU (1 piece = 0.01 CPU`},
		{"0.505", true, 0, `cpu = "0.505": not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are 0.5 and 0.51`},
		{"0", true, 0, `cpu = "0": is 0; a CPU-bound instance needs at least 1 piece`},
		{"1e9", true, 0, `cpu = "1e9": want a number of CPUs from 0 to 1000000`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := requestPieces(tt.in, 100, tt.bind)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "e+09") || connect.CodeOf(err) != connect.CodeInvalidArgument {
					t.Errorf("requestPieces(%q) error = %v, want invalid argument %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("requestPieces(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestToConnect(t *testing.T) {
	t.Parallel()
	for code, want := range map[service.Code]connect.Code{
		service.Invalid: connect.CodeInvalidArgument, service.NotFound: connect.CodeNotFound, service.Exists: connect.CodeAlreadyExists,
		service.Precond: connect.CodeFailedPrecondition, service.Exhausted: connect.CodeResourceExhausted, service.Conflicted: connect.CodeAborted,
	} {
		if got := connect.CodeOf(toConnect(&service.Error{Code: code, Message: "m"})); got != want {
			t.Errorf("toConnect(%s) = %s, want %s", code, got, want)
		}
	}
	if got := connect.CodeOf(toConnect(errors.New("boom"))); got != connect.CodeInternal {
		t.Errorf("internal error mapped to %s", got)
	}
}

// resizePlanner is a Planner that records the resizes that reach it; the
// methods these tests do not call are left to the embedded nil interface.
type resizePlanner struct {
	Planner
	sb  int // share base; 0 = 100
	got []service.ResizeRequest
}

func (p *resizePlanner) Params() alloc.Params {
	return alloc.Params{ShareBase: cmp.Or(p.sb, 100), MaxFragmentCores: -1}
}

func (p *resizePlanner) ResizePreempting(_ context.Context, r service.ResizeRequest) ([]model.Instance, []service.Victim, error) {
	p.got = append(p.got, r)
	return nil, nil, nil
}

// TestResizeRefusesNoChange: a JSON or gRPC caller's resize that changes
// nothing (a CPU delta below one piece, or nothing given) is refused with
// the field, the value and the smallest step; it never reaches the planner.
func TestResizeRefusesNoChange(t *testing.T) {
	t.Parallel()
	yes := true
	for _, tt := range []struct {
		name    string
		sb      int // 0 = 100
		req     *pinfoldv1.ResizeRequest
		wantErr string // "" = accepted
		want    service.ResizeRequest
	}{
		{"below a piece", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "+0.001"}, `cpu_delta = "+0.001": less than one piece of a CPU, it changes nothing: the smallest step is 0.01 CPU`, service.ResizeRequest{}},
		{"below a piece, negative, with memory", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "-0.004", MemoryDeltaBytes: 1}, `cpu_delta = "-0.004"`, service.ResizeRequest{}},
		{"nothing", 0, &pinfoldv1.ResizeRequest{Target: "web"}, "nothing to change", service.ResizeRequest{}},
		{"zero cpu only", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "0"}, "nothing to change", service.ResizeRequest{}},
		{"half a piece is refused, not rounded up", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "0.005"}, `cpu_delta = "0.005": less than one piece of a CPU`, service.ResizeRequest{}},
		{"a piece and a half is refused, not rounded", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "0.015"}, `cpu_delta = "0.015": not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are +0.01 and +0.02`, service.ResizeRequest{}},
		{"off the grid, negative", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "-1.495"}, `cpu_delta = "-1.495": not a whole number of pieces of a CPU (1 piece = 0.01 CPU at share base 100): the nearest amounts are -1.49 and -1.5`, service.ResizeRequest{}},
		{"two pieces", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "-0.02"}, "", service.ResizeRequest{Target: "web", CPUDelta: -2}},
		{"zero cpu with memory", 0, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "0", MemoryDeltaBytes: -1 << 20}, "", service.ResizeRequest{Target: "web", MemoryDelta: -1 << 20}},
		{"bind only", 0, &pinfoldv1.ResizeRequest{Target: "web", Bind: &yes}, "", service.ResizeRequest{Target: "web", Bind: &yes}},
		// At a share base that is not a power of ten one piece is what
		// FormatPieces writes, 0.0156 of 64 (0.9984 pieces as a float), as
		// apply sends it: it was refused as less than one piece.
		{"one piece at 64", 64, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "0.0156"}, "", service.ResizeRequest{Target: "web", CPUDelta: 1}},
		{"minus one piece at 3000", 3000, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "-0.0003"}, "", service.ResizeRequest{Target: "web", CPUDelta: -1}},
		{"below a piece at 64", 64, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "0.015"}, `cpu_delta = "0.015": less than one piece of a CPU, it changes nothing: the smallest step is 0.0156 CPU (1 piece; share base 64)`, service.ResizeRequest{}},
		{"off the grid at 3000", 3000, &pinfoldv1.ResizeRequest{Target: "web", CpuDelta: "-0.0005"}, `cpu_delta = "-0.0005": not a whole number of pieces of a CPU (1 piece = 0.0003 CPU at share base 3000): the nearest amounts are -0.0003 and -0.0007`, service.ResizeRequest{}},
		// A size instead of deltas: both halves, no delta beside it.
		{"to a size", 0, &pinfoldv1.ResizeRequest{Target: "web", ToCpu: "1.5", ToMemoryBytes: 1 << 30}, "", service.ResizeRequest{Target: "web", To: &service.ResizeTo{Pieces: 150, Memory: 1 << 30}}},
		{"to a size of 0 CPUs", 0, &pinfoldv1.ResizeRequest{Target: "web", ToCpu: "0", ToMemoryBytes: 1 << 30}, "", service.ResizeRequest{Target: "web", To: &service.ResizeTo{Pieces: 0, Memory: 1 << 30}}},
		{"to a size and a delta", 0, &pinfoldv1.ResizeRequest{Target: "web", ToCpu: "1.5", ToMemoryBytes: 1 << 30, CpuDelta: "+1"},
			`to_cpu = "1.5", to_memory_bytes = 1073741824: a size is given with cpu_delta = "+1", memory_delta_bytes = 0: give a size or deltas, not both`, service.ResizeRequest{}},
		{"to a cpu alone", 0, &pinfoldv1.ResizeRequest{Target: "web", ToCpu: "1.5"}, `to_cpu = "1.5", to_memory_bytes = 0: a size needs both`, service.ResizeRequest{}},
		{"to a memory alone", 0, &pinfoldv1.ResizeRequest{Target: "web", ToMemoryBytes: 1 << 30}, `to_cpu = "", to_memory_bytes = 1073741824: a size needs both`, service.ResizeRequest{}},
		{"to a size off the grid", 0, &pinfoldv1.ResizeRequest{Target: "web", ToCpu: "1.505", ToMemoryBytes: 1 << 30}, `to_cpu = "1.505": not a whole number of pieces`, service.ResizeRequest{}},
		{"to a negative size", 0, &pinfoldv1.ResizeRequest{Target: "web", ToCpu: "-1", ToMemoryBytes: 1 << 30}, `to_cpu = "-1": must not be negative`, service.ResizeRequest{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &resizePlanner{sb: tt.sb}
			_, err := newServer(p, nil).Resize(context.Background(), connect.NewRequest(tt.req))
			if tt.wantErr != "" {
				if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tt.wantErr) || len(p.got) != 0 {
					t.Errorf("Resize(%v) = %v, reached the planner %d times; want invalid argument %q", tt.req, err, len(p.got), tt.wantErr)
				}
				return
			}
			if err != nil || len(p.got) != 1 || p.got[0].Target != tt.want.Target || p.got[0].CPUDelta != tt.want.CPUDelta ||
				p.got[0].MemoryDelta != tt.want.MemoryDelta || p.got[0].Bind != tt.want.Bind ||
				(p.got[0].To == nil) != (tt.want.To == nil) || p.got[0].To != nil && *p.got[0].To != *tt.want.To {
				t.Errorf("Resize(%v) = %v, planner got %+v; want %+v", tt.req, err, p.got, tt.want)
			}
		})
	}
}

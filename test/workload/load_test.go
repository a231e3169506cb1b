package workload

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		want    Load
		wantErr string
	}{
		{spec: "spin:4", want: Load{Kind: Spin, N: 4}},
		{spec: "bursty:8:5:20", want: Load{Kind: Bursty, N: 8, On: 5, Off: 20}},
		{spec: "forks:4:20", want: Load{Kind: Forks, N: 4, On: 20}},
		{spec: "idle", want: Load{Kind: Idle}},
		{spec: "", wantErr: `unknown kind ""`},
		{spec: "jvm:4", wantErr: `unknown kind "jvm"`},
		{spec: "spin", wantErr: "spin takes 1 numbers, got 0"},
		{spec: "bursty:8:5", wantErr: "bursty takes 3 numbers, got 2"},
		{spec: "spin:0", wantErr: `field 1 = "0": want a whole number 1..1024`},
		{spec: "spin:-1", wantErr: `field 1 = "-1"`},
		{spec: "go:1025", wantErr: `field 1 = "1025"`},
		{spec: "forks:65:20", wantErr: "at most 64 loops"},
		{spec: "idle:3", wantErr: "idle takes 0 numbers, got 1"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := Parse(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %v, %v; want an error with %q", tc.spec, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
			}
		})
	}
}

// Every load of the matrix goes through the environment as its String and
// comes back the same; its demand is what the docs' tables say.
func TestMatrixRoundTrip(t *testing.T) {
	for _, c := range Matrix {
		for _, l := range []Load{c.A, c.B} {
			back, err := Parse(l.String())
			if err != nil || back != l {
				t.Errorf("%s: Parse(%q) = %+v, %v; want %+v", c.Name, l.String(), back, err, l)
			}
		}
	}
	if d := (Load{Kind: Bursty, N: 8, On: 5, Off: 20}).Demand(); d != 1.6 {
		t.Errorf("bursty 8x5/20 demand = %v, want 1.6", d)
	}
}

func TestSeenRoundTrip(t *testing.T) {
	s := Seen{GOMAXPROCS: 2, MinGOMAXPROCS: 1, AffMain: 2, AffNew: 1, SubCG: "move: operation not supported"}
	back, err := ParseSeen(s.String())
	if err != nil || back.MinGOMAXPROCS != 1 || back.SubCG != "move:_operation_not_supported" {
		t.Errorf("ParseSeen(%q) = %+v, %v", s.String(), back, err)
	}
}

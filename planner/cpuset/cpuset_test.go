package cpuset_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/cpuset"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string // canonical String() of the result
		wantLen int
		wantErr bool
	}{
		{in: "", want: "", wantLen: 0},
		{in: "\n", want: "", wantLen: 0},
		{in: "0", want: "0", wantLen: 1},
		{in: "0-3,8,10-11\n", want: "0-3,8,10-11", wantLen: 7}, // sysfs trailing newline
		{in: "5,1,2,3", want: "1-3,5", wantLen: 4},             // canonical order and ranges
		{in: "1-1", want: "1", wantLen: 1},
		{in: "0-2,1-5", want: "0-5", wantLen: 6}, // overlaps merge
		{in: "63,64", want: "63-64", wantLen: 2}, // word boundary
		{in: "0-127", want: "0-127", wantLen: 128},
		{in: "0-8191", want: "0-8191", wantLen: 8192},
		{in: "8191", want: "8191", wantLen: 1},
		{in: "3-1", wantErr: true},
		{in: "1,,2", wantErr: true},
		{in: ",1", wantErr: true},
		{in: "1,", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "1-", wantErr: true},
		{in: "1-2-3", wantErr: true},
		{in: "0-8192", wantErr: true},
		{in: "99999999999999999999", wantErr: true},
		{in: "a", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "0x1", wantErr: true},
		{in: "1 ,2", wantErr: true},
		{in: "1\n2", wantErr: true},
		{in: strings.Repeat("1,", 40000) + "1", wantErr: true}, // over the input bound
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 20 {
			name = name[:20]
		}
		t.Run(strconv.Quote(name), func(t *testing.T) {
			t.Parallel()
			got, err := cpuset.ParseCPUs(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseCPUs(%q) error = %v, wantErr %v", name, err, tt.wantErr)
			}
			if err != nil {
				var pe *cpuset.ParseError
				if !errors.As(err, &pe) {
					t.Fatalf("ParseCPUs(%q) error %T, want *ParseError", name, err)
				}
				if !strings.Contains(err.Error(), strconv.Quote(pe.Input)) {
					t.Errorf("error %q does not quote the input", err)
				}
				return
			}
			if got.String() != tt.want || got.Len() != tt.wantLen {
				t.Errorf("ParseCPUs(%q) = %q (len %d), want %q (len %d)", tt.in, got, got.Len(), tt.want, tt.wantLen)
			}
		})
	}
}

func TestSetAlgebra(t *testing.T) {
	t.Parallel()
	a := cpuset.MustParseCPUs("0-3,64-65,130")
	b := cpuset.MustParseCPUs("2-5,65")
	tests := []struct {
		name string
		got  cpuset.CPUs
		want string
	}{
		{"union", a.Union(b), "0-5,64-65,130"},
		{"intersect", a.Intersect(b), "2-3,65"},
		{"difference", a.Difference(b), "0-1,64,130"},
		{"difference reverse", b.Difference(a), "4-5"},
		{"difference to empty", b.Difference(b), ""},
		{"intersect disjoint", cpuset.Of[cpuset.CPUID](1).Intersect(cpuset.Of[cpuset.CPUID](200)), ""},
		{"range", cpuset.Range[cpuset.CPUID](62, 66), "62-66"},
		{"empty range", cpuset.Range[cpuset.CPUID](3, 2), ""},
		{"of", cpuset.Of[cpuset.CPUID](9, 3, 4), "3-4,9"},
	}
	for _, tt := range tests {
		if tt.got.String() != tt.want {
			t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if !b.Difference(a).IsSubsetOf(b) || a.IsSubsetOf(b) {
		t.Errorf("IsSubsetOf wrong for a=%s b=%s", a, b)
	}
	if !a.Intersect(b).Difference(b).IsEmpty() {
		t.Errorf("(a∩b)\\b not empty")
	}
	if a.Contains(4) || !a.Contains(130) || a.Contains(-1) || a.Contains(100000) {
		t.Errorf("Contains wrong on %s", a)
	}
	if m, ok := a.Min(); !ok || m != 0 {
		t.Errorf("Min(%s) = %d,%v", a, m, ok)
	}
	if _, ok := (cpuset.CPUs{}).Min(); ok {
		t.Errorf("Min of empty set reported ok")
	}
	// Immutability: results must not alias inputs.
	u := a.Union(cpuset.CPUs{})
	_ = u.Difference(a)
	if a.String() != "0-3,64-65,130" {
		t.Errorf("receiver changed: %s", a)
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	type doc struct {
		CPUs cpuset.CPUs `json:"cpus"`
		Mems cpuset.Mems `json:"mems"`
	}
	in := doc{CPUs: cpuset.MustParseCPUs("0-3,8"), Mems: cpuset.MustParseMems("1")}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"cpus":"0-3,8","mems":"1"}` {
		t.Fatalf("Marshal = %s", b)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !out.CPUs.Equal(in.CPUs) || !out.Mems.Equal(in.Mems) {
		t.Fatalf("round trip = %+v, want %+v", out, in)
	}
	if err := json.Unmarshal([]byte(`{"cpus":"3-1"}`), &out); err == nil || !strings.Contains(err.Error(), `"3-1"`) {
		t.Fatalf("Unmarshal of bad list: err = %v", err)
	}
}

// TestProperties checks set identities on random sets against a map model.
func TestProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	randSet := func() (cpuset.CPUs, map[int]bool) {
		m := map[int]bool{}
		var ids []cpuset.CPUID
		for range r.IntN(40) {
			id := r.IntN(300)
			m[id] = true
			ids = append(ids, cpuset.CPUID(id))
		}
		return cpuset.Of(ids...), m
	}
	universe := cpuset.Range[cpuset.CPUID](0, 299)
	for i := range 500 {
		a, am := randSet()
		b, bm := randSet()
		if a.Len() != len(am) || b.Len() != len(bm) {
			t.Fatalf("#%d Len(%s) = %d, want %d", i, a, a.Len(), len(am))
		}
		for id := range 300 {
			if a.Contains(cpuset.CPUID(id)) != am[id] {
				t.Fatalf("#%d Contains(%d) on %s wrong", i, id, a)
			}
		}
		if !a.Union(b).Difference(b).IsSubsetOf(a) {
			t.Fatalf("#%d (a∪b)\\b ⊄ a for a=%s b=%s", i, a, b)
		}
		if a.Union(b).Len() != a.Len()+b.Len()-a.Intersect(b).Len() {
			t.Fatalf("#%d inclusion-exclusion fails for a=%s b=%s", i, a, b)
		}
		// De Morgan over the universe.
		l := universe.Difference(a.Union(b))
		r := universe.Difference(a).Intersect(universe.Difference(b))
		if !l.Equal(r) {
			t.Fatalf("#%d De Morgan fails: %s vs %s", i, l, r)
		}
		again, err := cpuset.ParseCPUs(a.String())
		if err != nil || !again.Equal(a) {
			t.Fatalf("#%d round trip %s -> %s, %v", i, a, again, err)
		}
		s := a.Slice()
		for j := 1; j < len(s); j++ {
			if s[j-1] >= s[j] {
				t.Fatalf("#%d Slice not ascending: %v", i, s)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "0", "0-3,8,10-11\n", "3-1", "0-8191", "1,,2", "-1", "63-64"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := cpuset.ParseCPUs(s)
		if err != nil {
			return
		}
		str := set.String()
		again, err := cpuset.ParseCPUs(str)
		if err != nil || !again.Equal(set) {
			t.Fatalf("round trip %q -> %q -> %v, %v", s, str, again, err)
		}
		if again.String() != str {
			t.Fatalf("String not canonical: %q then %q", str, again.String())
		}
	})
}

func BenchmarkParse(b *testing.B) {
	s := "0-31,64-95,128,130,132-191"
	for b.Loop() {
		if _, err := cpuset.ParseCPUs(s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStringRuns: String lists the runs of consecutive IDs, whatever the
// density: random sets from sparse to full, with runs that cross and fill
// 64-bit words, up to cpuset.MaxID; checked against a model built from
// Slice.
func TestStringRuns(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	model := func(s cpuset.CPUs) string {
		var parts []string
		ids := s.Slice()
		for i := 0; i < len(ids); {
			j := i
			for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
				j++
			}
			if j > i {
				parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
			} else {
				parts = append(parts, fmt.Sprint(ids[i]))
			}
			i = j + 1
		}
		return strings.Join(parts, ",")
	}
	for i := range 300 {
		limit := []int{64, 65, 128, 300, cpuset.MaxID + 1}[i%5]
		density := r.Float64()
		var ids []cpuset.CPUID
		for id := range limit {
			if r.Float64() < density {
				ids = append(ids, cpuset.CPUID(id))
			}
		}
		s := cpuset.Of(ids...)
		if got, want := s.String(), model(s); got != want {
			t.Fatalf("#%d String() = %.200q, want %.200q", i, got, want)
		}
	}
	for _, tt := range []struct {
		lo, hi int
		want   string
	}{{0, 0, "0"}, {0, 63, "0-63"}, {63, 64, "63-64"}, {1, 127, "1-127"}, {64, 191, "64-191"}, {0, cpuset.MaxID, "0-8191"}} {
		if got := cpuset.Range(cpuset.CPUID(tt.lo), cpuset.CPUID(tt.hi)).String(); got != tt.want {
			t.Errorf("Range(%d, %d).String() = %q, want %q", tt.lo, tt.hi, got, tt.want)
		}
	}
	if got := (cpuset.CPUs{}).String(); got != "" {
		t.Errorf("empty set String() = %q, want \"\"", got)
	}
}

// BenchmarkStringFull formats the set of every CPU (0-8191): each CPU of
// the largest topology lists it as its L3 group, so a registration formats
// it 8,192 times over.
func BenchmarkStringFull(b *testing.B) {
	s := cpuset.Range[cpuset.CPUID](0, cpuset.MaxID)
	for b.Loop() {
		if s.String() != "0-8191" {
			b.Fatal(s.String())
		}
	}
}
